"""The restart policy with stand-in tasks: what is restarted, from which checkpoint, and when it gives up."""

import re

from tests.helpers import pids_alive
from tests.process.launching import HEALTHY, ON_FAILURE, make_config, run


def test_on_failure_restarts_the_training_group_and_finishes(tmp_path):
    config = make_config(tmp_path, restart=ON_FAILURE)
    code, out, summary, _, _ = run(config, {**HEALTHY, "chief:0": "chief_fails_once"})
    assert code == 0, out
    assert "restart 1/2: chief:0 exit code 200 at step 20; starting chief:0, worker:0 again from checkpoint None" in out
    [restart] = summary["restarts"]
    assert restart["failed_task"] == "chief:0" and restart["reason"] == "exit code 200"
    assert restart["restarted_tasks"] == ["chief:0", "worker:0"]  # the evaluator kept running
    assert restart["step_at_failure"] == 20 and restart["steps_redone"] == 20
    assert summary["status"] == "finished" and summary["global_step"] == 100
    assert len(summary["all_pids"]) == 5 and not pids_alive(summary["all_pids"])


def test_never_does_not_restart(tmp_path):
    config = make_config(tmp_path)
    code, out, summary, _, _ = run(config, {**HEALTHY, "chief:0": "chief_fails_once"})
    assert code == 200 and summary["restarts"] == []  # retryable, but restarting is left to the caller
    assert "failed: task chief:0 failed (exit code 200)" in out


def test_gives_up_after_max_restarts(tmp_path):
    config = make_config(tmp_path, restart=ON_FAILURE)
    code, out, summary, _, _ = run(config, {"chief:0": "hang_ignoring_sigterm", "worker:0": "fail_soon",
                                            "evaluator:0": "evaluator_never_final"})
    assert code == 1
    assert len(summary["restarts"]) == 2
    assert re.search(r"failed: task worker:0 failed \(exit code 200\).*; gave up after 2 restarts in a row without a newer checkpoint "
                     r"\(restart\.max_restarts=2\)", out), out
    assert not pids_alive(summary["all_pids"])


def test_preemptions_are_never_incidents(tmp_path):
    """restart.max_restarts: 0, and the chief preempted four times, each stop step saved and marked: the run
    restarts each time and finishes; the record names each preemption as one."""
    config = make_config(tmp_path, restart={**ON_FAILURE, "max_restarts": 0})
    code, out, summary, _, _ = run(config, {**HEALTHY, "chief:0": "chief_preempted_4_times"})
    assert code == 0, out
    assert [r["counted"] for r in summary["restarts"]] == [False] * 4 and summary["status"] == "finished"
    for number, step in enumerate((10, 20, 30, 40), start=1):
        assert f"chief:0 preempted at step {step}, checkpoint {step} written: preemption {number}, not counted" in out


def test_a_stall_is_a_failure_that_restarts(tmp_path):
    config = make_config(tmp_path, restart=ON_FAILURE, launcher={"stall_timeout_secs": 3})
    code, out, summary, _, _ = run(config, {**HEALTHY, "chief:0": "chief_stalls_once"})
    assert code == 0, out
    [restart] = summary["restarts"]
    assert restart["failed_task"] is None and restart["reason"].startswith("stalled for 5 s")  # 3 + startup 2
    assert not pids_alive(summary["all_pids"])


def test_a_task_stopped_by_a_signal_is_named_and_restarted_within_the_stall_timeout(tmp_path):
    """A stopped process still accepts its peers' connections; they wait for it. The stopped one is named."""
    config = make_config(tmp_path, restart=ON_FAILURE, launcher={"stall_timeout_secs": 3})
    code, out, summary, _, _ = run(config, {**HEALTHY, "chief:0": "chief_slow", "worker:0": "worker_stops_once"})
    assert code == 0, out
    [restart] = summary["restarts"]
    assert restart["failed_task"] == "worker:0" and restart["reason"].startswith("stopped by a signal for "), restart
    assert restart["seconds_since_launch"] < 3 + 6  # the stall timeout, from a stop about 1 s in, plus polling
    assert "task worker:0 has been stopped by a signal (process state T" in restart["error"]
    assert not pids_alive(summary["all_pids"])


def test_a_failed_evaluator_is_restarted_alone(tmp_path):
    config = make_config(tmp_path, restart=ON_FAILURE)
    code, out, summary, _, _ = run(config, {**HEALTHY, "evaluator:0": "evaluator_fails_once"})
    assert code == 0, out
    [restart] = summary["restarts"]
    assert restart["restarted_tasks"] == ["evaluator:0"] and restart["steps_redone"] == 0
    assert summary["accuracy"] == 0.97




def test_a_permanent_failure_is_not_restarted(tmp_path):
    """Exit 1 says a restart would not cure it: only 200 and deaths by a signal are restarted."""
    config = make_config(tmp_path, restart=ON_FAILURE)
    # The chief never finishes, so the worker's failure cannot come after training is over.
    code, out, summary, _, _ = run(config, {"chief:0": "hang_ignoring_sigterm", "worker:0": "fail_permanently",
                                            "evaluator:0": "evaluator_never_final"})
    assert code == 1 and summary["restarts"] == []
    assert "failed: task worker:0 failed (exit code 1)" in out and "(not retryable: only exit code 200" in out
    assert not pids_alive(summary["all_pids"])
