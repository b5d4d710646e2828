"""Operations under the real two-node Slurm in its common configuration, without MpiParams=ports
(tests/e2e/slurm_cluster.py; the module's own cluster, beside the session's): two jobs whose ports collided
under the old hash (ids 1000 and 1456: crc32 % 512 gave both slot 238) run at once on one node and both
finish, each task on a port it chose free and held (sbatch has no --jobid in 22.05: the test raises the
cluster's FirstJobId); and a two-task job preempted three times (one more than restart.max_restarts: 2) with
`scancel --signal=TERM`, each after some progress, trains on, while its worker killed (SIGKILL) at every start
ends the job with 1 and one line after 2 reruns in a row, though srun then stops the chief with SIGTERM.
Together about two and a half minutes on 2 busy cores."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from estimator_mnist.model_files.checkpoints import latest_step
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.model_files.layout import BUDGET_FILE
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


def test_two_jobs_whose_ports_collided_under_the_hash_share_a_node(slurm_without_reserved_ports, tmp_path,
                                                                    mnist_data_dir):
    slurm, jobs = slurm_without_reserved_ports, {}
    for job_id, where in ((1000, tmp_path / "a"), (1456, tmp_path / "b")):
        script = write_job(where, mnist_data_dir, worker=True, steps=30, save=10, delay=100,
                           options=("--nodelist=n1",))
        slurm.next_job_id_at_least(job_id)
        jobs[slurm.run(["sbatch", "--parsable", str(script)], cwd=where).stdout.strip().split(";")[0]] = where
    assert list(jobs) == ["1000", "1456"], jobs
    for job_id, where in jobs.items():
        wait_for(lambda: finished(slurm, job_id), WAIT_SECS, f"job {job_id}'s end", lambda: job_output(slurm, where))
    outputs = {job_id: job_output(slurm, where, whole=True) for job_id, where in jobs.items()}
    states = {job_id: slurm.job(job_id) for job_id in jobs}
    for job_id, state in states.items():
        assert state["JobState"] == "COMPLETED" and state["ExitCode"] == "0:0", outputs[job_id][-6000:]
        assert "ports chosen free on each node (no ports reserved" in outputs[job_id]
    # At once, on one node, on ports of their own.
    assert all(state["NodeList"] == "n1" for state in states.values()), states
    a, b = states.values()
    assert a["StartTime"] <= b["EndTime"] and b["StartTime"] <= a["EndTime"], (a, b)
    assert not set(ports_of(outputs["1000"])) & set(ports_of(outputs["1456"])), outputs
    assert not slurm.processes_left(str(tmp_path))


def kill_worker(job_id, killed):
    """SIGKILL to the worker's train process (rank 1) of job `job_id`, once per process: a crash nobody asked for."""
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}".encode() in environ and b"SLURM_PROCID=1" in environ and b"train" in args \
                and b"estimator_mnist.tf_task" not in args and proc.name not in killed:
            os.kill(int(proc.name), signal.SIGKILL)
            killed.add(proc.name)
    return len(killed)


def test_preemptions_never_count_and_a_worker_killed_at_every_start_ends_the_job(slurm_without_reserved_ports,
                                                                                 tmp_path, mnist_data_dir):
    slurm = slurm_without_reserved_ports
    script = write_job(tmp_path, mnist_data_dir, worker=True, steps=100000, save=100000, delay=30)
    job_id = slurm.run(["sbatch", "--parsable", str(script)], cwd=tmp_path).stdout.strip().split(";")[0]
    model_dir, details = str(tmp_path / "model"), lambda: job_output(slurm, tmp_path)
    stops = []
    for number in range(1, 4):  # one more preemption than restart.max_restarts
        since = stops[-1] if stops else 0
        wait_for(lambda: any((r.get("global_step") or 0) >= since + 5 for r in read_progress(str(tmp_path / "run"))
                             .values()), WAIT_SECS, f"progress past step {since + 5}", details)
        slurm.run(["scancel", "--signal=TERM", job_id])  # to the step's tasks, as a preemption of them
        wait_for(lambda: f"resumes after preemption {number} " in job_output(slurm, tmp_path), 60,
                 f"preemption {number}", details)
        stops.append(latest_step(model_dir))
        assert stops[-1] > since, stops
    killed = set()  # the fault: the worker killed as soon as it starts, before its first step, at every start
    wait_for(lambda: kill_worker(job_id, killed) and finished(slurm, job_id), WAIT_SECS, "the job's end", details)
    output = job_output(slurm, tmp_path, whole=True)
    state = slurm.job(job_id)
    assert state["JobState"] == "FAILED" and state["ExitCode"] == "1:0", (state, output[-6000:])
    errors = [line for line in output.splitlines() if "restart budget is used up" in line]
    assert len(errors) == 1 and f"job slurm-{job_id} failed 3 times in a row without a newer checkpoint " \
        "(restart.max_restarts=2)" in errors[0] and "worker:0 (rank 1) ended with no word" in errors[0], output[-6000:]
    record = json.loads((tmp_path / "model" / BUDGET_FILE).read_text())
    assert [p["step"] for p in record["preemptions"]] == stops and len(record["incidents"]) == 3, record
    assert len(killed) == 3 and latest_step(model_dir) == stops[-1]  # killed before any step of its own
    assert not slurm.processes_left(str(tmp_path))
