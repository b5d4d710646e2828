"""What the user sees: the console's progress reports and `estimator-mnist summary`."""

import io
import json
import re

import pytest

from estimator_mnist.errors import UsageError
from estimator_mnist.supervise.launch.report import CLEAR_LINE, PROGRESS_EVERY_SECS, Console, final_line
from estimator_mnist.supervise.run_summary import ERR_NOT_A_RUN, collect, table


class FakeMonitor:
    def __init__(self, step=None, validation=None):
        self.step, self.loss, self.images_per_sec = step, 0.05, 4321.0
        self.validation = validation

    def latest_eval(self):
        return {"global_step": 200, "accuracy": 0.9887, **(self.validation or {})}

    def seconds_left(self, now):
        return 42.0


def reports(console, monitor, times):
    for now in times:
        console.progress(monitor, 700, 3, now)


def test_progress_is_reported_at_most_every_five_seconds_with_rate_evaluation_and_time_left():
    out = io.StringIO()
    console = Console(out, tty=False, start=0.0)
    reports(console, FakeMonitor(step=310), [100.0 + 0.5 * i for i in range(41)])  # 20 s of polling
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 + 20 // PROGRESS_EVERY_SECS
    assert re.search(r"step 310/700, 4,321 images/s, loss 0.0500, last evaluation: step 200 test accuracy 0.9887, "
                     r"about 42 s left$", lines[0])


def test_with_a_validation_split_the_console_shows_both_figures_and_names_the_test_one():
    out = io.StringIO()
    console = Console(out, tty=False, start=0.0)
    reports(console, FakeMonitor(310, {"validation_accuracy": 0.9902, "validation_loss": 0.04}), [100.0])
    console.evaluation({"global_step": 200, "accuracy": 0.9887, "loss": 0.05, "validation_accuracy": 0.9902,
                        "validation_loss": 0.04})
    first, second = out.getvalue().splitlines()
    assert "last evaluation: step 200 test accuracy 0.9887 validation accuracy 0.9902, about 42 s left" in first
    assert second.endswith("evaluation of step 200: test accuracy 0.9887, loss 0.0500, validation accuracy 0.9902, "
                           "loss 0.0400")
    summary = {"accuracy": 0.9887, "global_step": 200, "export": "/e/1", "validation_accuracy": 0.9902}
    assert final_line(summary) == "finished: accuracy=0.9887 global_step=200 export=/e/1 validation_accuracy=0.9902"
    assert final_line({**summary, "validation_accuracy": None}) == "finished: accuracy=0.9887 global_step=200 export=/e/1"


def test_on_a_terminal_progress_rewrites_one_line_and_other_lines_clear_it_first():
    out = io.StringIO()
    console = Console(out, tty=True, start=0.0)
    reports(console, FakeMonitor(step=10), [10.0, 20.0])
    console.say("evaluation of step 200: accuracy 0.9887")
    text = out.getvalue()
    assert text.count(CLEAR_LINE) == 3 and text.count("\n") == 1
    assert text.endswith(CLEAR_LINE + "evaluation of step 200: accuracy 0.9887\n")


def test_quiet_prints_no_progress():
    out = io.StringIO()
    reports(Console(out, quiet=True, tty=False, start=0.0), FakeMonitor(step=10), [10.0, 20.0])
    assert out.getvalue() == ""


def write_run(tmp_path, launched=True, validation=False):
    model_dir = tmp_path / "run" / "model"
    model_dir.mkdir(parents=True)
    evaluations = [(0, 0.11, 1010.0, False), (200, 0.985, 1030.0, False), (400, 0.9925, 1050.0, False),
                   (700, 0.9931, 1080.0, True)]
    (model_dir / "eval_results.jsonl").write_text("".join(
        json.dumps({"global_step": s, "accuracy": a, "loss": 0.1, "time": t, "final": f,
                    **({"validation_accuracy": a + 0.001, "validation_loss": 0.09} if validation else {}),
                    "export": f"{model_dir}/export/latest/{s}"}) + "\n" for s, a, t, f in evaluations))
    progress = tmp_path / "run" / "progress"
    progress.mkdir()
    for task in ("chief-0", "worker-0"):
        (progress / f"{task}.json").write_text(json.dumps({
            "task": task.replace("-", ":"), "first_step_time": 1005.0 if task == "chief-0" else 1006.0,
            "examples_per_step": 256, "step_times": [[1, 1005.0], [701, 1075.0]], "time": 1075.0,
            "precision": "mixed_bfloat16"}))
    if launched:
        (tmp_path / "run" / "run_summary.json").write_text(json.dumps({
            "status": "finished", "model_dir": str(model_dir), "run_dir": str(tmp_path / "run"),
            "restarts": [{"attempt": 1}], "launch_time": 1000.0, "seconds_to_first_step": 5.0}))
    return tmp_path / "run"


def test_summary_of_a_launched_run(tmp_path):
    facts = collect(str(write_run(tmp_path)))
    assert facts["status"] == "finished" and facts["restarts"] == 1 and facts["accuracy"] == 0.9931
    assert facts["images_per_sec"] == pytest.approx(2 * 700 * 256 / 70.0)
    assert facts["seconds_to_accuracy"] == {"0.98": {"step": 200, "seconds": 25.0},
                                            "0.99": {"step": 400, "seconds": 45.0},
                                            "0.992": {"step": 400, "seconds": 45.0}}
    text = "\n".join(table(facts))
    assert re.search(r"^to 99.2%\s+45.0 s \(step 400\)$", text, re.MULTILINE), text
    assert re.search(r"^restarts\s+1$", text, re.MULTILINE) and "export/latest/700" in text
    assert re.search(r"^precision\s+mixed_bfloat16$", text, re.MULTILINE)
    assert re.search(r"^test accuracy\s+0.9931$", text, re.MULTILINE)
    assert re.search(r"^validation accuracy\s+- \(no validation split\)$", text, re.MULTILINE)


def test_summary_with_a_validation_split_shows_both_accuracies_at_every_evaluation(tmp_path):
    facts = collect(str(write_run(tmp_path, validation=True)))
    assert facts["accuracy"] == 0.9931 and facts["validation_accuracy"] == pytest.approx(0.9941)
    assert facts["evaluations"][1]["validation_loss"] == 0.09
    text = "\n".join(table(facts))
    assert re.search(r"^test accuracy\s+0.9931$", text, re.MULTILINE)
    assert re.search(r"^validation accuracy\s+0.9941$", text, re.MULTILINE)
    assert re.search(r"step\s+test acc\s+loss\s+val acc\s+val loss", text)
    assert re.search(r"^\s+700\s+0.9931\s+0.1000\s+0.9941\s+0.0900\s", text, re.MULTILINE), text


def test_summary_of_a_run_started_by_hand_has_no_restart_count(tmp_path):
    run_dir = write_run(tmp_path, launched=False)
    facts = collect(str(run_dir))
    assert facts["status"] == "finished" and facts["restarts"] is None
    assert facts["seconds_to_accuracy"]["0.99"] == {"step": 400, "seconds": 45.0}  # from the first record
    assert "not started by launch" in "\n".join(table(facts))


def test_summary_of_something_else_is_refused(tmp_path):
    with pytest.raises(UsageError, match=re.escape(ERR_NOT_A_RUN.split("{")[0])):
        collect(str(tmp_path))
