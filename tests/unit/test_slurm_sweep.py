"""`sweep --slurm` without Slurm: the job array's script, the trials left in it, the refusals, the records that
array tasks on several nodes update under one lock, an array task's one-line refusals, and `sweep-status`."""

import multiprocessing
import subprocess
import sys

import pytest

from estimator_mnist.errors import UsageError
from estimator_mnist.slurm import sweep_script
from estimator_mnist.sweep.array_task import (ERR_NO_DATA, ERR_NOT_ARRAY, ERR_NOT_SHARED, MAX_IDLE_RERUNS, ArrayTask,
                                               Reruns)
from estimator_mnist.sweep import records, shared
from estimator_mnist.sweep.run import array_script, build_plan
from estimator_mnist.sweep.status import status_text
from tests.helpers import REPO, error_pattern

BASE = """
cluster: {{chief: ["localhost:1"], worker: ["localhost:2"]}}
training: {{max_steps: 30, save_checkpoints_steps: 10, preemption_grace_secs: 40}}
data_dir: {data_dir}
"""
PARAMS = ["model.learning_rate=0.001,0.003", "training.batch_size_per_replica=32,64"]


def _plan(tmp_path, params=PARAMS):
    (tmp_path / "data").mkdir(exist_ok=True)
    base = tmp_path / "base.yaml"
    base.write_text(BASE.format(data_dir=tmp_path / "data"))
    return build_plan(str(base), params, sweep_dir=str(tmp_path / "s"), slurm=True, early_stop="median")


def test_array_spec_lists_the_trials_left_in_runs_with_the_concurrency():
    assert sweep_script.array_spec([0, 1, 2, 3], 2) == "0-3%2"
    assert sweep_script.array_spec([1, 3, 4, 5, 9], None) == "1,3-5,9"


def test_the_script_is_one_array_task_per_trial_running_the_same_sweep(tmp_path, capsys):
    plan = _plan(tmp_path)
    options = sweep_script.ArrayOptions(parallel=2, cpus=3, memory="6G", gpus=1, partition="gpu", extra=("--qos=x",))
    script = array_script(plan, ["--cluster", "B", "--sweep-dir", str(plan.sweep_dir)], options)
    for line in ("#SBATCH --array=0-3%2", "#SBATCH --ntasks=1", "#SBATCH --cpus-per-task=3", "#SBATCH --mem=6G",
                 "#SBATCH --gpus-per-task=1", "#SBATCH --partition=gpu", "#SBATCH --requeue", "#SBATCH --qos=x",
                 "#SBATCH --signal=B:TERM@70", f"#SBATCH --output={plan.sweep_dir}/slurm-logs/%A_%a.out"):
        assert line in script.splitlines() or script.count(line + " ") == 1, line
    assert script.splitlines()[-1].endswith(f"sweep --cluster B --sweep-dir {plan.sweep_dir} --array-task")
    assert "4 to run" in capsys.readouterr().err
    assert all((t.directory / "trial.yaml").is_file() for t in plan.trials)
    assert records.read_sweep(plan.sweep_dir)["ranked_by"] == "validation_accuracy"


def test_finished_and_stopped_trials_are_left_out_and_a_done_sweep_still_gives_a_script(tmp_path, capsys):
    plan = _plan(tmp_path)
    array_script(plan, [], sweep_script.ArrayOptions())
    for name, state in (("trial-000", "finished"), ("trial-002", "stopped")):
        shared.update_row(plan.sweep_dir, name, lambda row, state=state: row.update(state=state))
    assert "#SBATCH --array=1,3\n" in array_script(plan, [], sweep_script.ArrayOptions())
    for name in ("trial-001", "trial-003"):
        shared.update_row(plan.sweep_dir, name, lambda row: row.update(state="finished"))
    assert "#SBATCH --array=0-3\n" in array_script(plan, [], sweep_script.ArrayOptions())
    assert "every trial is done: each array task of this script exits 0 at once" in capsys.readouterr().err


def test_options_the_script_sets_itself_and_local_devices_are_refused(tmp_path):
    plan = _plan(tmp_path)
    for option in ("--array=0-9", "-c4", "--output=x", "--mem=1G"):
        with pytest.raises(UsageError, match=error_pattern(sweep_script.ERR_OPTION)):
            array_script(plan, [], sweep_script.ArrayOptions(extra=(option,)))
    base = tmp_path / "base.yaml"
    result = subprocess.run([sys.executable, "-m", "estimator_mnist", "sweep", "--cluster", str(base), "--param",
                             PARAMS[0], "--slurm", "--devices", "cpu:0"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2 and "with --slurm, Slurm places them" in result.stderr, result.stderr
    result = subprocess.run([sys.executable, "-m", "estimator_mnist", "sweep", "--cluster", str(base), "--param",
                             PARAMS[0], "--mem-per-trial", "2G"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2 and "--mem-per-trial: goes with --slurm" in result.stderr, result.stderr


def _bump(sweep_dir, name, times):
    for _ in range(times):
        shared.update_row(sweep_dir, name, lambda row: row.update(attempts=row.get("attempts", 0) + 1))


def test_updates_from_many_processes_at_once_lose_nothing(tmp_path):
    plan = _plan(tmp_path)
    array_script(plan, [], sweep_script.ArrayOptions())
    # Fresh interpreters, as the array tasks that share the record are: a fork of this worker (TensorFlow's and
    # xdist's threads in it) once spun at 100% CPU in a finalizer inside the lock, and the other three waited.
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_bump, args=(plan.sweep_dir, t.name, 25)) for t in plan.trials]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0] * 4
    assert [t["attempts"] for t in records.read_sweep(plan.sweep_dir)["trials"]] == [25] * 4


def test_an_array_task_refuses_in_one_line_what_its_node_cannot_run(tmp_path):
    plan = _plan(tmp_path)
    with pytest.raises(UsageError, match=error_pattern(ERR_NOT_ARRAY)):
        ArrayTask(plan, {})
    task = ArrayTask(plan, {"SLURM_ARRAY_TASK_ID": "1", "SLURMD_NODENAME": "n2", "SLURM_JOB_ID": "7"})
    with pytest.raises(UsageError, match=error_pattern(ERR_NOT_SHARED)) as info:
        task.check()  # sweep.json was written on the submitting host: not seen here
    assert "node n2" in str(info.value)
    array_script(plan, [], sweep_script.ArrayOptions())
    with pytest.raises(UsageError, match=error_pattern(ERR_NO_DATA)):
        task.check()
    other = _plan(tmp_path, ["model.learning_rate=0.01,0.003", PARAMS[1]])
    with pytest.raises(UsageError, match=error_pattern(records.ERR_OTHER_SWEEP)):
        ArrayTask(other, {"SLURM_ARRAY_TASK_ID": "1"}).check()


def test_sweep_status_shows_every_trial_the_counts_and_the_best_so_far(tmp_path):
    plan = _plan(tmp_path)
    array_script(plan, [], sweep_script.ArrayOptions())
    shared.update_row(plan.sweep_dir, "trial-001", lambda row: row.update(state="finished", validation_accuracy=0.97,
                                                                          accuracy=0.96))
    shared.update_row(plan.sweep_dir, "trial-002", lambda row: row.update(state="running"))
    text = status_text(plan.sweep_dir)
    assert "4 trials: 1 finished, 2 pending, 1 running" in text
    assert "best so far: trial-001 (model.learning_rate=0.001 training.batch_size_per_replica=64) validation " \
           "accuracy 0.9700 (chose), test accuracy 0.9600" in text


def test_only_reruns_that_lost_steps_count_against_max_restarts():
    reruns = Reruns(max_restarts=2)
    assert reruns.count(newer=False, trained=True) is None and reruns.count(newer=False, trained=True) is None
    assert reruns.count(newer=True, trained=True) is None  # a newer checkpoint: the count begins again
    assert reruns.count(newer=False, trained=True) is None and reruns.count(newer=False, trained=True) is None
    assert "3 failures in a row without a newer checkpoint" in reruns.count(newer=False, trained=True)
    idle = Reruns(max_restarts=0)  # stopped while starting (scancel's retries): nothing lost, up to a bound
    assert all(idle.count(newer=False, trained=False) is None for _ in range(MAX_IDLE_RERUNS))
    assert "ended before the trial took a step" in idle.count(newer=False, trained=False)


def _hold(directory, ready, release):
    with shared.trial_lock(directory) as mine:
        ready.put(mine)
        release.get(timeout=60)


def test_one_trial_is_run_by_one_array_task_at_a_time(tmp_path):
    ready, release = multiprocessing.Queue(), multiprocessing.Queue()
    holder = multiprocessing.Process(target=_hold, args=(tmp_path / "trial-000", ready, release))
    holder.start()
    assert ready.get(timeout=60) is True
    with shared.trial_lock(tmp_path / "trial-000") as mine:
        assert mine is False  # another process, as on another node, holds it
    release.put(None)
    holder.join(60)
    with shared.trial_lock(tmp_path / "trial-000") as mine:
        assert mine is True
