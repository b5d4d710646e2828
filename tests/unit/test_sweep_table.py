"""The sweep's console: a table redrawn in place on a terminal, one line every 30 s elsewhere."""

import io

from estimator_mnist.sweep.table import CHOSE_NOTE, LINE_EVERY_SECS, UP_AND_CLEAR, SweepConsole, rows_text

ROWS = [{"trial": "trial-000", "values": {"model.dropout": 0.2}, "state": "running", "device": "cpu:0",
         "global_step": 30, "accuracy": 0.91, "validation_accuracy": 0.93},
        {"trial": "trial-001", "values": {"model.dropout": 0.4}, "state": "pending"}]


def _console(tty):
    now = [0.0]
    out = io.StringIO()
    return SweepConsole(out, tty=tty, clock=lambda: now[0]), out, now


def test_the_table_has_trial_values_device_step_both_accuracies_and_state_and_says_which_one_chooses():
    header, first, second, note = rows_text(ROWS)
    assert header.split() == ["trial", "model.dropout", "device", "step", "val_acc*", "test_acc", "state"]
    assert first.split() == ["trial-000", "0.2", "cpu:0", "30", "0.9300", "0.9100", "running"]
    assert second.split() == ["trial-001", "0.4", "-", "-", "-", "-", "pending"]
    assert note == CHOSE_NOTE["validation_accuracy"] and "test accuracy is only reported" in note
    header, *_, note = rows_text(ROWS, ranked_by="accuracy")  # a sweep whose trials hold out no split
    assert header.split()[4:6] == ["val_acc", "test_acc*"] and "TEST accuracy stops and ranks" in note


def test_on_a_terminal_the_table_is_redrawn_in_place_and_events_clear_it_first():
    console, out, now = _console(tty=True)
    now[0] = 10
    console.table(ROWS, {"trial-000"})
    console.event("trial-000 finished")
    assert out.getvalue() == "\n".join(rows_text(ROWS)) + "\n" + UP_AND_CLEAR.format(n=4) + \
        "sweep: trial-000 finished\n"


def test_elsewhere_one_line_on_the_running_trials_every_30_s():
    console, out, now = _console(tty=False)
    for now[0] in (LINE_EVERY_SECS + 1, LINE_EVERY_SECS + 10, 2 * LINE_EVERY_SECS + 2):
        console.table(ROWS, {"trial-000"})
    assert out.getvalue().splitlines() == ["sweep: trial-000 step 30 validation accuracy 0.9300 test accuracy 0.9100 "
                                          "(1 pending, 1 running)"] * 2
