"""Operations under the real two-node Slurm (tests/e2e/slurm_cluster.py, whose slurm.conf reserves ports with
MpiParams=ports): two jobs whose ids are equal modulo 512 run at once on one node and both finish (their ports
were the same before the ports came from Slurm's reservation; sbatch has no --jobid in 22.05, so the test
raises the cluster's FirstJobId for the second); and a one-task job preempted three times (one more than
restart.max_restarts: 2) with `scancel --signal=TERM`, each after some progress, trains on, while a fault that
repeats without progress (the step's task killed as soon as it starts) ends the job with 1 after 2 reruns in a
row. Together about two minutes on 2 busy cores, sharing the session's cluster."""

import json
import re
import subprocess
import sys
import time

import pytest

from estimator_mnist.checkpoints import latest_step
from estimator_mnist.progress import read_progress
from estimator_mnist.supervise.restart_budget import RECORD_FILE
from tests.e2e.test_slurm import finished, job_output, wait_for
from tests.helpers import REPO

JOB_YAML = """
cluster: {{chief: ["localhost:2222"]{worker}}}
strategy: multi_worker_mirrored
training: {{batch_size_per_replica: 32, max_steps: {steps}, save_checkpoints_steps: {save}, log_step_count_steps: 5,
           preemption_grace_secs: 20, teardown_timeout_secs: 1}}
evaluation: {{throttle_secs: 100000, start_delay_secs: 100000}}
tasks: {{all: {{step_delay_ms: {delay}}}}}
restart: {{max_restarts: 2}}
"""
WAIT_SECS = 300


def write_job(tmp_path, data_dir, worker=False, steps=20, save=10, delay=0, options=()):
    tmp_path.mkdir(parents=True, exist_ok=True)
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(JOB_YAML.format(worker=', worker: ["localhost:2223"]' if worker else "", steps=steps,
                                         save=save, delay=delay))
    script = subprocess.run([sys.executable, "-m", "estimator_mnist", "slurm", "--cluster", str(yaml_file),
                             "--nodes", "1", "--data-dir", data_dir, "--model-dir", str(tmp_path / "model"),
                             "--run-dir", str(tmp_path / "run"), "--", f"--output={tmp_path / 'job.out'}", *options],
                            capture_output=True, text=True, check=True, cwd=REPO).stdout
    (tmp_path / "job.sh").write_text(script)
    return tmp_path / "job.sh"


def ports_of(output):
    return sorted(set(re.findall(r"chief:0 n1:(\d+)", output)))


def test_two_jobs_whose_ids_are_equal_modulo_512_share_a_node(slurm, tmp_path, mnist_data_dir):
    jobs = {}
    for where in (tmp_path / "a", tmp_path / "b"):
        script = write_job(where, mnist_data_dir, worker=True, steps=30, save=10, delay=100,
                           options=("--nodelist=n1",))
        if jobs:  # the second job's id: the first one's + 512
            slurm.next_job_id_at_least(int(next(iter(jobs))) + 512)
        jobs[slurm.run(["sbatch", "--parsable", str(script)], cwd=where).stdout.strip().split(";")[0]] = where
    first, second = map(int, jobs)
    assert second == first + 512, jobs
    for job_id, where in jobs.items():
        wait_for(lambda: finished(slurm, job_id), WAIT_SECS, f"job {job_id}'s end", lambda: job_output(slurm, where))
    outputs = {job_id: job_output(slurm, where, whole=True) for job_id, where in jobs.items()}
    states = {job_id: slurm.job(job_id) for job_id in jobs}
    for job_id, state in states.items():
        assert state["JobState"] == "COMPLETED" and state["ExitCode"] == "0:0", outputs[job_id][-6000:]
        assert "ports reserved by Slurm (SLURM_STEP_RESV_PORTS)" in outputs[job_id]
    # At once, on one node, on ports of their own.
    assert all(state["NodeList"] == "n1" for state in states.values()), states
    a, b = states.values()
    assert a["StartTime"] <= b["EndTime"] and b["StartTime"] <= a["EndTime"], (a, b)
    assert not set(ports_of(outputs[str(first)])) & set(ports_of(outputs[str(second)])), outputs
    assert not slurm.processes_left(str(tmp_path))


def step_starts(tmp_path, job_id):
    """How many times the step's task has started (its note, one per start, in rank 0's log)."""
    log = tmp_path / "run" / "logs" / f"slurm-{job_id}" / "rank-0.log"
    return log.read_text(errors="replace").count(f"Slurm job {job_id} step") if log.exists() else 0


def crashes(tmp_path, job_id):
    """How many steps srun reported ended by SIGUSR2."""
    logs = (tmp_path / "run" / "logs" / f"slurm-{job_id}").glob("srun-*.err")
    return sum("User defined signal 2" in path.read_text(errors="replace") for path in logs)


def test_preemptions_never_count_and_a_fault_without_progress_ends_the_job(slurm, tmp_path, mnist_data_dir):
    script = write_job(tmp_path, mnist_data_dir, steps=100000, save=100000, delay=30)
    job_id = slurm.run(["sbatch", "--parsable", str(script)], cwd=tmp_path).stdout.strip().split(";")[0]
    model_dir, details = str(tmp_path / "model"), lambda: job_output(slurm, tmp_path)
    stops = []
    for number in range(1, 4):  # one more preemption than restart.max_restarts
        since = stops[-1] if stops else 0
        wait_for(lambda: any((r.get("global_step") or 0) >= since + 5 for r in read_progress(str(tmp_path / "run"))
                             .values()), WAIT_SECS, f"progress past step {since + 5}", details)
        slurm.run(["scancel", "--signal=TERM", job_id])  # to the step's task, as a preemption of it
        wait_for(lambda: f"resumes after preemption {number} " in job_output(slurm, tmp_path), 60,
                 f"preemption {number}", details)
        stops.append(latest_step(model_dir))
        assert stops[-1] > since, stops
    for start in range(4, 7):  # the fault: the step's task killed as soon as it starts, three times
        wait_for(lambda: step_starts(tmp_path, job_id) >= start, WAIT_SECS, f"the step's start {start}", details)
        # SIGUSR2 ends a task as a crash would (no handler: a death by a signal, 200). Not KILL: scancel takes
        # --signal=KILL for a cancel of the whole job. A signal sent while Slurm still launches the step is lost:
        # sent again until srun reports the death.
        wait_for(lambda: slurm.run(["scancel", "--signal=USR2", job_id], check=False) and time.sleep(1) or
                 crashes(tmp_path, job_id) >= start - 3, 60, f"the crash of start {start}", details)
    wait_for(lambda: finished(slurm, job_id), 60, "the job's end", details)
    output = job_output(slurm, tmp_path, whole=True)
    state = slurm.job(job_id)
    assert state["JobState"] == "FAILED" and state["ExitCode"] == "1:0", (state, output[-6000:])
    errors = [line for line in output.splitlines() if "restart budget is used up" in line]
    assert len(errors) == 1 and f"job slurm-{job_id} failed 3 times in a row without a newer checkpoint " \
        "(restart.max_restarts=2)" in errors[0], output[-6000:]
    record = json.loads((tmp_path / "model" / RECORD_FILE).read_text())
    assert [p["step"] for p in record["preemptions"]] == stops and len(record["incidents"]) == 3
    assert not slurm.processes_left(str(tmp_path))
