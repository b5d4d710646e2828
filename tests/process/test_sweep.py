"""The sweep's scheduler with stand-in trials (fake_trial.py) whose accuracies are scripted: parallel starts,
early stopping by the median rule, a failed trial recorded while the others finish, Ctrl-C, and resuming. The
scripts are validation accuracies; each test accuracy runs against them, so stopping or ranking on it would show."""

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from estimator_mnist.errors import INTERRUPTED_EXIT_CODE
from estimator_mnist.sweep import records
from estimator_mnist.sweep.run import build_plan, run_sweep
from tests.helpers import REPO, descendants, pids_alive

FAKE = str(Path(__file__).parent / "fake_trial.py")
DRIVER = str(Path(__file__).parent / "sweep_driver.py")
BASE = """
cluster: {{chief: ["localhost:1"], worker: ["localhost:2"]}}
training: {{max_steps: 30, save_checkpoints_steps: 10}}
data_dir: {data_dir}
"""


def _base(tmp_path) -> str:
    (tmp_path / "data").mkdir()
    path = tmp_path / "base.yaml"
    path.write_text(BASE.format(data_dir=tmp_path / "data"))
    return str(path)


def _sweep(tmp_path, scripts, early_stop="median"):
    plan = build_plan(_base(tmp_path), [f"model.dropout={','.join(str(i / 10) for i in range(len(scripts)))}"],
                      parallel=2, early_stop=early_stop, sweep_dir=str(tmp_path / "sweep"), allowed=[0, 1], gpus=[])

    def command(trial):
        return [sys.executable, FAKE, str(trial.directory), *scripts[int(trial.name.split("-")[-1])].split()]

    out = io.StringIO()
    code = run_sweep(plan, out=out, command_for=command, poll_secs=0.1, stop_grace_secs=2)
    return code, records.read_sweep(plan.sweep_dir), out.getvalue()


def test_a_clearly_worse_trial_is_stopped_by_the_median_rule_and_its_device_goes_to_the_next(tmp_path):
    good = "0.95,0.97,0.98 0.6 0"
    scripts = [good, good, "0.50,0.55,0.60 3 0", "0.95,0.97,0.98 6 0", good]
    code, record, out = _sweep(tmp_path, scripts)
    states = [t["state"] for t in record["trials"]]
    assert code == 0, out
    assert states == ["finished", "finished", "stopped", "finished", "finished"], out
    stopped = record["trials"][2]
    assert stopped["stopped_at_step"] == 10 and "validation accuracy 0.5000 at step 10 is below the median" in \
        stopped["reason"]
    assert stopped["ended"] - stopped["started"] < 6  # stopped at its first evaluation (3 s), not after its 9 s
    following = record["trials"][4]  # the freed device took the next trial while trial-003 still ran
    assert following["device"] == stopped["device"] and following["started"] >= stopped["ended"]
    assert "trial-002 stopped" in out and "median rule" in out


def test_without_early_stopping_every_trial_runs_to_its_end(tmp_path):
    code, record, _ = _sweep(tmp_path, ["0.95,0.97,0.98 0.3 0"] * 3 + ["0.5,0.5,0.5 0.3 0"], early_stop="none")
    assert code == 0 and [t["state"] for t in record["trials"]] == ["finished"] * 4


def test_a_failed_trial_is_recorded_with_its_log_and_the_others_finish(tmp_path):
    code, record, out = _sweep(tmp_path, ["0.9,0.95,0.97 0.3 0", "0.9 0.3 1", "0.9,0.96,0.98 0.3 0"])
    failed = record["trials"][1]
    assert code == 1
    assert failed["state"] == "failed" and "exit code 1" in failed["reason"]
    assert failed["log"] in failed["reason"] and Path(failed["log"]).is_file()
    assert [t["state"] for t in record["trials"]] == ["finished", "failed", "finished"]
    assert record["best"] == "trial-002" and (tmp_path / "sweep" / records.BEST_FILE).is_file()  # best on validation
    assert record["ranked_by"] == "validation_accuracy" and record["trials"][0]["accuracy"] > record["trials"][2]["accuracy"]
    assert "best: trial-002 (model.dropout=0.2) validation accuracy 0.9800 (chose), test accuracy 0.5200" in out
    assert "1 trial(s) failed: trial-001" in out


def test_two_trials_run_at_once_on_their_own_cores(tmp_path):
    _, record, _ = _sweep(tmp_path, ["0.9,0.95,0.97 0.6 0"] * 2)
    first, second = record["trials"]
    assert first["started"] < second["ended"] and second["started"] < first["ended"]
    assert first["affinity"] == [0] and second["affinity"] == [1]
    assert first["cpus_seen"] == [0] and second["cpus_seen"] == [1]  # what each trial's own record says


def test_ctrl_c_stops_every_trial_and_the_same_sweep_resumes_them(tmp_path):
    base, sweep_dir = _base(tmp_path), tmp_path / "sweep"
    scripts = ["0.9,0.95,0.97 20 0 ignore_sigterm"] * 2
    driver = subprocess.Popen([sys.executable, DRIVER, base, str(sweep_dir), *scripts], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, trial_pids = time.time() + 60, []
    while time.time() < deadline and len(trial_pids) < 2:
        time.sleep(0.2)
        trial_pids = descendants(driver.pid)
    time.sleep(0.5)
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=60)
    assert driver.returncode == INTERRUPTED_EXIT_CODE, out
    assert len(trial_pids) >= 2 and not pids_alive(trial_pids), out  # SIGKILL after the grace period
    record = records.read_sweep(sweep_dir)
    assert [t["state"] for t in record["trials"]] == ["interrupted"] * 2, out
    assert "resumes it" in record["trials"][0]["reason"]

    quick = ["0.9,0.95,0.97 0.3 0"] * 2
    again = subprocess.run([sys.executable, DRIVER, base, str(sweep_dir), *quick], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
    record = records.read_sweep(sweep_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [(t["state"], t["attempts"]) for t in record["trials"]] == [("finished", 2)] * 2

    nothing = subprocess.run([sys.executable, DRIVER, base, str(sweep_dir), *quick], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
    assert nothing.returncode == 0 and "0 to run (2 already done)" in nothing.stdout
    assert json.loads((sweep_dir / records.SWEEP_FILE).read_text())["trials"] == record["trials"]
