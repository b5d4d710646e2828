"""What the user sees: the console's progress reports and `estimator-mnist summary`."""

import io
import json
import re

import pytest

from estimator_mnist.errors import UsageError
from estimator_mnist.launch.report import CLEAR_LINE, PROGRESS_EVERY_SECS, Console
from estimator_mnist.run_summary import ERR_NOT_A_RUN, collect, table


class FakeMonitor:
    def __init__(self, step=None):
        self.step, self.loss, self.images_per_sec = step, 0.05, 4321.0

    def latest_eval(self):
        return {"global_step": 200, "accuracy": 0.9887}

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
    assert re.search(r"step 310/700, 4,321 images/s, loss 0.0500, last evaluation: step 200 accuracy 0.9887, "
                     r"about 42 s left$", lines[0])


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


def write_run(tmp_path, launched=True):
    model_dir = tmp_path / "run" / "model"
    model_dir.mkdir(parents=True)
    evaluations = [(0, 0.11, 1010.0, False), (200, 0.985, 1030.0, False), (400, 0.9925, 1050.0, False),
                   (700, 0.9931, 1080.0, True)]
    (model_dir / "eval_results.jsonl").write_text("".join(
        json.dumps({"global_step": s, "accuracy": a, "loss": 0.1, "time": t, "final": f,
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


def test_summary_of_a_run_started_by_hand_has_no_restart_count(tmp_path):
    run_dir = write_run(tmp_path, launched=False)
    facts = collect(str(run_dir))
    assert facts["status"] == "finished" and facts["restarts"] is None
    assert facts["seconds_to_accuracy"]["0.99"] == {"step": 400, "seconds": 45.0}  # from the first record
    assert "not started by launch" in "\n".join(table(facts))


def test_summary_of_something_else_is_refused(tmp_path):
    with pytest.raises(UsageError, match=re.escape(ERR_NOT_A_RUN.split("{")[0])):
        collect(str(tmp_path))
