"""A sweep as a Slurm job array on the real two-node cluster (tests/e2e/slurm_cluster.py, shared with
test_slurm.py): `sweep --slurm` writes the script, sbatch runs it two trials at a time, one per node (each asks
for 3 of a node's 4 CPUs); the median rule, applied by each array task against the others' evaluations in the
shared directory, stops the trials of a learning rate of 1e-6; sweep.json, sweep.csv and best.yaml are as a
local sweep's, `ensemble --sweep-dir` takes them; the same script again trains nothing; another sweep in the
directory is refused. A SIGTERM to a running trial's step makes its array task run it again from its
checkpoint, and one to the array task itself requeues it; the record shows each attempt. Tiny trials: about
3-4 minutes in all (2 busy cores)."""

import subprocess
import sys
import time

import pytest
import yaml

from estimator_mnist.model_files.checkpoints import latest_step
from estimator_mnist.config import config_from_dict
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.sweep import records
from tests.e2e.test_slurm import finished, wait_for
from tests.helpers import REPO

BASE = """
cluster: {{chief: ["localhost:2222"]}}
training: {{max_steps: {steps}, save_checkpoints_steps: {save}, log_step_count_steps: 10, preemption_grace_secs: 20}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0}}
tasks: {{all: {{step_delay_ms: {delay}}}}}
data_dir: {data_dir}
"""
GRID = ["--param", "model.learning_rate=0.003,1e-6", "--param", "training.batch_size_per_replica=32,64"]
WAIT_SECS = 400


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "estimator_mnist", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def sweep_script(tmp_path, data_dir, params, *flags, steps=20, save=10, delay=0):
    base = tmp_path / "base.yaml"
    base.write_text(BASE.format(steps=steps, save=save, delay=delay, data_dir=data_dir))
    args = ["sweep", "--cluster", str(base), *params, "--sweep-dir", str(tmp_path / "s"), "--slurm", *flags]
    return cli(*args), args


def outputs(tmp_path):
    files = sorted((tmp_path / "s").glob("slurm-logs/*.out")) + sorted((tmp_path / "s").glob("*/trial.log"))
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in files)


def submit(slurm, tmp_path, script, wait=True):
    (tmp_path / "sweep.sh").write_text(script)
    result = slurm.run(["sbatch", "--parsable", *(["--wait"] if wait else []), str(tmp_path / "sweep.sh")],
                       check=False, timeout=WAIT_SECS, cwd=tmp_path)
    assert result.returncode == 0, f"{result.stdout}{result.stderr}\n{outputs(tmp_path)}"
    return result.stdout.strip().split(";")[0]


@pytest.fixture(scope="module")
def grid(slurm, tmp_path_factory, mnist_data_dir):
    tmp_path = tmp_path_factory.mktemp("slurm-sweep")
    made, args = sweep_script(tmp_path, mnist_data_dir, GRID, "--parallel", "2", "--cores-per-trial", "3",
                              "--early-stop", "median")
    assert made.returncode == 0 and "#SBATCH --array=0-3%2" in made.stdout, made.stdout + made.stderr
    job = submit(slurm, tmp_path, made.stdout)
    return {"dir": tmp_path / "s", "tmp": tmp_path, "job": job, "script": made.stdout, "args": args}


def test_the_array_runs_two_trials_at_a_time_on_both_nodes_and_the_median_rule_stops_the_hopeless(grid):
    record = records.read_sweep(grid["dir"])
    trials = record["trials"]
    states = [t["state"] for t in trials]
    # The two hopeless trials (learning rate 1e-6) run at once: the rule needs the other trials' evaluations at
    # that step, so the one that evaluates first may see too few and finish; the later one is always stopped.
    assert states[:2] == ["finished", "finished"] and "stopped" in states[2:], outputs(grid["tmp"])
    assert set(states[2:]) <= {"finished", "stopped"}, outputs(grid["tmp"])
    assert {trials[0]["node"], trials[1]["node"]} == {"n1", "n2"}  # 3 CPUs each: one trial per 4-CPU node
    assert trials[0]["started"] < trials[1]["ended"] and trials[1]["started"] < trials[0]["ended"]
    for stopped in (t for t in trials[2:] if t["state"] == "stopped"):
        assert stopped["reason"].startswith("median rule: validation accuracy") and stopped["stopped_at_step"] > 0
    for t in trials:
        log = (grid["dir"] / t["trial"] / "trial.log").read_text()
        assert log.startswith("[estimator-mnist] task chief:0 spec {"), log[:300]  # started from its TaskSpec
        spec = (grid["dir"] / t["trial"] / "trial.spec.json").read_text()
        assert '"intra_op_threads":3' in spec  # its threads sized to the 3 CPUs Slurm gave it
    out = outputs(grid["tmp"])
    assert " stopped validation accuracy" in out and "best: trial-00" in out and "step " in out


def test_the_records_are_a_local_sweep_s_and_ensemble_takes_them(grid):
    record = records.read_sweep(grid["dir"])
    assert record["ranked_by"] == "validation_accuracy"
    assert record["best"] == max(record["trials"][:2], key=lambda t: t["validation_accuracy"])["trial"]
    rows = (grid["dir"] / records.CSV_FILE).read_text().splitlines()
    assert len(rows) == 5 and rows[0].startswith("trial,state,model.learning_rate,training.batch_size_per_replica")
    config_from_dict(yaml.safe_load((grid["dir"] / records.BEST_FILE).read_text()), "best.yaml")
    status = cli("sweep-status", "--sweep-dir", str(grid["dir"]))
    states = [t["state"] for t in record["trials"]]
    summary = f"4 trials: {states.count('finished')} finished, {states.count('stopped')} stopped"
    assert status.returncode == 0 and summary in status.stdout, status.stdout + status.stderr
    built = cli("ensemble", "--sweep-dir", str(grid["dir"]), "--top", "2", timeout=600)  # TensorFlow, on 2 busy cores
    assert built.returncode == 0 and records.read_sweep(grid["dir"])["ensemble"]["members"], built.stdout + built.stderr


def test_the_same_script_again_trains_nothing_and_another_sweep_is_refused(slurm, grid):
    before = records.read_sweep(grid["dir"])["trials"]
    again = cli(*grid["args"])
    assert again.returncode == 0 and "0 to run (4 already done)" in again.stderr, again.stderr
    job = submit(slurm, grid["tmp"], grid["script"])
    assert slurm.job(job)["JobState"] == "COMPLETED" or slurm.job(f"{job}_0")["JobState"] == "COMPLETED"
    after = records.read_sweep(grid["dir"])["trials"]
    assert [t["attempts"] for t in after] == [t["attempts"] for t in before]
    assert "is already finished: nothing to run" in outputs(grid["tmp"])
    other = cli(*[a if a != "model.learning_rate=0.003,1e-6" else "model.learning_rate=0.01,1e-6"
                  for a in grid["args"]])
    lines = other.stderr.strip().splitlines()
    assert other.returncode == 2 and len(lines) == 1 and "holds a different sweep" in lines[0], other.stderr


def test_a_signalled_trial_runs_again_from_its_checkpoint_and_a_signalled_array_task_requeues(slurm, tmp_path,
                                                                                              mnist_data_dir):
    made, _ = sweep_script(tmp_path, mnist_data_dir, ["--param", "model.learning_rate=0.003"], "--cores-per-trial",
                           "2", steps=80, save=80, delay=150)
    assert made.returncode == 0, made.stderr
    job = submit(slurm, tmp_path, made.stdout, wait=False)
    model_dir = str(tmp_path / "s" / "trial-000" / "model")

    def past(step):
        return lambda: (read_progress(str(tmp_path / "s" / "trial-000")).get("chief:0") or {}).get("global_step", 0) \
            >= step

    wait_for(past(10), WAIT_SECS, "training past step 10", lambda: outputs(tmp_path))
    slurm.run(["scancel", "--signal=TERM", f"{job}_0"])  # the trial's step: it stops at a saved step, runs again
    wait_for(lambda: len(records.read_sweep(tmp_path / "s")["trials"][0].get("history", [])) >= 2, 90,
             "the second attempt", lambda: outputs(tmp_path))
    first_stop = latest_step(model_dir)
    wait_for(past(first_stop + 5), WAIT_SECS, "training past the first stop", lambda: outputs(tmp_path))
    slurm.run(["scancel", "--batch", "--signal=TERM", f"{job}_0"])  # the array task: preempted, requeued
    wait_for(lambda: finished(slurm, f"{job}_0") and slurm.job(f"{job}_0").get("Restarts", "0") != "0", WAIT_SECS,
             "the requeued array task's end", lambda: outputs(tmp_path))
    row = records.read_sweep(tmp_path / "s")["trials"][0]
    out = outputs(tmp_path)
    assert row["state"] == "finished" and row["attempts"] == 3, (row, out)
    assert [h["state"] for h in row["history"]] == ["interrupted", "interrupted", "finished"], row["history"]
    assert row["history"][1]["from_step"] == first_stop and 0 < first_stop < row["history"][2]["from_step"] < 80
    assert "preempted" in row["history"][1]["reason"] and "runs again" in row["history"][0]["reason"]
    log = (tmp_path / "s" / "trial-000" / "trial.log").read_text()
    for stop in (first_stop, row["history"][2]["from_step"]):  # each stop saved its step, the next run restored it
        assert f"Restoring parameters from {model_dir}/model.ckpt-{stop}" in log, out
    assert not slurm.processes_left(str(tmp_path))


def test_a_cancelled_array_task_is_not_requeued_and_sweep_status_says_cancelled(slurm, tmp_path, mnist_data_dir):
    made, _ = sweep_script(tmp_path, mnist_data_dir, ["--param", "model.learning_rate=0.003"], steps=1500, save=10,
                           delay=100)
    assert made.returncode == 0, made.stderr
    job = submit(slurm, tmp_path, made.stdout, wait=False)
    wait_for(lambda: latest_step(str(tmp_path / "s" / "trial-000" / "model")), WAIT_SECS, "the first checkpoint",
             lambda: outputs(tmp_path))
    slurm.run(["scancel", f"{job}_0"])
    wait_for(lambda: slurm.job(f"{job}_0")["JobState"] == "CANCELLED", 90, "the cancel's end",
             lambda: outputs(tmp_path))
    time.sleep(5)  # a requeue would have made it PENDING at once
    state = slurm.job(f"{job}_0")
    row = records.read_sweep(tmp_path / "s")["trials"][0]
    assert state["JobState"] == "CANCELLED" and state["Restarts"] == "0", (state, outputs(tmp_path))
    assert row["state"] == "cancelled" and "not requeued" in row["reason"], row
    status = cli("sweep-status", "--sweep-dir", str(tmp_path / "s"))
    assert status.returncode == 0 and "1 trials: 1 cancelled" in status.stdout, status.stdout + status.stderr
    assert not slurm.processes_left(str(tmp_path))
