"""The cluster under a real two-node Slurm (tests/e2e/slurm_cluster.py): the script `estimator-mnist slurm`
writes, submitted with sbatch, trains, evaluates and exports with the chief and the worker on different nodes
that share only a bucket; a SIGTERM to the step's tasks makes the script rerun the step from the one saved step;
a step of the wrong size is one line and exit 2; a plain scancel is final. Together they take about 2 minutes
(2 busy cores, Xeon family 6 model 207), the cluster's daemons included."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from estimator_mnist.model_files.checkpoints import latest_step, read_eval_results
from estimator_mnist.model_files.progress import read_progress
from tests.helpers import REPO

JOB_YAML = """
cluster: {{chief: ["localhost:2222"], worker: ["localhost:2223"], evaluator: localhost}}
strategy: multi_worker_mirrored
training: {{batch_size_per_replica: 32, max_steps: {steps}, save_checkpoints_steps: {save}, log_step_count_steps: 10,
           preemption_grace_secs: 25}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0}}
tasks: {{all: {{step_delay_ms: {delay}}}}}
restart: {{max_restarts: 2}}
"""
WAIT_SECS = 300
GRACE_SECS = 25  # training.preemption_grace_secs in JOB_YAML


def submit(slurm, tmp_path, mnist_data_dir, steps=30, save=10, delay=0, wait=True):
    """Writes the YAML and the script, submits it; (job id, sbatch's process or result)."""
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(JOB_YAML.format(steps=steps, save=save, delay=delay))
    script = subprocess.run([sys.executable, "-m", "estimator_mnist", "slurm", "--cluster", str(yaml_file),
                             "--nodes", "2", "--job-name", "em-test", "--data-dir", mnist_data_dir,
                             "--model-dir", str(tmp_path / "model"), "--run-dir", str(tmp_path / "run"),
                             "--", f"--output={tmp_path / 'job.out'}"],
                            capture_output=True, text=True, check=True, cwd=REPO).stdout
    (tmp_path / "job.sh").write_text(script)
    command = ["sbatch", "--parsable", *(["--wait"] if wait else []), str(tmp_path / "job.sh")]
    if wait:
        result = slurm.run(command, check=False, timeout=WAIT_SECS, cwd=tmp_path)
        return result.stdout.strip().split(";")[0], result
    result = slurm.run(command, cwd=tmp_path)
    return result.stdout.strip().split(";")[0], None


def head_and_tail(text):
    return text if len(text) < 5000 else f"{text[:1500]}\n[...]\n{text[-2500:]}"


def job_output(slurm, tmp_path, whole=False):
    """The job's output file and every task's log (for a failure message: their heads and tails)."""
    cut = (lambda text: text) if whole else head_and_tail
    logs = sorted((tmp_path / "run" / "logs").glob("slurm-*/*"))
    text = "\n".join(f"--- {p.name}\n{cut(p.read_text(errors='replace'))}" for p in logs)
    out = tmp_path / "job.out"
    return f"--- job.out\n{out.read_text(errors='replace') if out.exists() else ''}\n{text}"


def wait_for(predicate, timeout, what, details):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {timeout} s:\n{details()}")


def finished(slurm, job_id):
    state = slurm.job(job_id)
    return state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


def wait_for_training(slurm, tmp_path, past_step):
    def training():
        steps = [r.get("global_step") or 0 for r in read_progress(str(tmp_path / "run")).values()]
        return steps and max(steps) >= past_step

    wait_for(training, WAIT_SECS, f"training past step {past_step}", lambda: job_output(slurm, tmp_path))


def test_scancel_term_reruns_the_step_from_its_saved_step(slurm, tmp_path, mnist_data_dir):
    """A job of 50 slowed steps. A signal to the batch shell (a time limit, scancel --batch) requeues the job: the
    process tier has it (tests/process/test_slurm_script.py), and the real cluster's preemption runs the same
    requeue (test_slurm_preemption.py)."""
    job_id, _ = submit(slurm, tmp_path, mnist_data_dir, steps=50, save=50, delay=150, wait=False)
    model_dir = str(tmp_path / "model")
    wait_for_training(slurm, tmp_path, 10)
    # SIGTERM to the step's tasks: every trainer stops at one saved step with 200, the script reruns the step.
    signalled = time.monotonic()
    slurm.run(["scancel", "--signal=TERM", job_id])
    # A preemption with its stop step saved: rerun, and never counted against restart.max_restarts.
    wait_for(lambda: "resumes after preemption 1" in job_output(slurm, tmp_path), GRACE_SECS,
             "the step's end within the grace",
             lambda: job_output(slurm, tmp_path))
    stopped_in, stop = time.monotonic() - signalled, latest_step(model_dir)
    logs = tmp_path / "run" / "logs" / f"slurm-{job_id}"
    first_step = (logs / "srun-0.0.err").read_text()  # asked to stop, the tasks said 200 and exited 0 to srun
    assert "Exited with exit code" not in first_step and "Terminating" not in first_step, first_step
    assert all("its code 200 (asked to stop)" in (logs / f"rank-{r}.log").read_text() for r in (0, 2)), first_step
    assert stopped_in < GRACE_SECS and stop and stop < 50, (stopped_in, stop)
    wait_for(lambda: finished(slurm, job_id), WAIT_SECS, "the job's end", lambda: job_output(slurm, tmp_path))
    output = job_output(slurm, tmp_path, whole=True)
    assert slurm.job(job_id)["JobState"] == "COMPLETED", output[-20000:]
    # The stop step, as every trainer chose it (a trainer may get srun's second SIGTERM first and say so).
    assert f"a trainer was preempted: stopping after step {stop}" in output, output[-20000:]
    assert f"Restoring parameters from {model_dir}/model.ckpt-{stop}" in output, output[-20000:]
    evaluations = read_eval_results(model_dir)
    assert evaluations and evaluations[-1]["global_step"] >= 50 and evaluations[-1]["final"], output[-20000:]
    assert not (tmp_path / "model" / "slurm" / job_id).exists()  # the step's records went with the job
    assert not slurm.processes_left(str(tmp_path))


def test_a_step_whose_task_count_differs_from_the_yaml_s_is_one_line_and_exit_2(slurm, tmp_path):
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(JOB_YAML.format(steps=10, save=10, delay=0))
    result = slurm.run(["srun", "--nodes=2", "--ntasks=2", sys.executable, "-m", "estimator_mnist", "train",
                        "--cluster", str(yaml_file), "--run-dir", str(tmp_path / "run")], check=False, cwd=REPO)
    lines = [line for line in result.stderr.splitlines() if line.startswith("estimator-mnist: error:")]
    assert result.returncode == 2, result.stderr
    assert lines and all("the cluster has 3 tasks (chief:0, evaluator:0, worker:0) but the Slurm step has 2" in line
                         for line in lines), result.stderr
    assert not slurm.processes_left(str(tmp_path))


def test_a_plain_scancel_is_final_the_job_stays_cancelled_and_the_summary_says_so(slurm, tmp_path, mnist_data_dir):
    """The cancel's SIGTERM reaches the batch shell as a preemption's would: Slurm's job state tells them apart."""
    job_id, _ = submit(slurm, tmp_path, mnist_data_dir, steps=1500, save=10, delay=100, wait=False)
    wait_for(lambda: latest_step(str(tmp_path / "model")), WAIT_SECS, "the first checkpoint",
             lambda: job_output(slurm, tmp_path))
    slurm.run(["scancel", job_id])
    wait_for(lambda: slurm.job(job_id)["JobState"] == "CANCELLED", 90, "the cancel's end",
             lambda: job_output(slurm, tmp_path))
    time.sleep(5)  # a requeue would have made it PENDING at once
    output = job_output(slurm, tmp_path, whole=True)
    job = slurm.job(job_id)
    assert job["JobState"] == "CANCELLED" and job["Restarts"] == "0", (job, output[-6000:])
    assert "not requeued: a cancel is final" in output and "requeueing" not in output, output[-6000:]
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["status"].startswith("cancelled (scancel) at step") and summary["slurm"]["cancelled"], summary
    assert set(summary["tasks"].values()) == {"cancelled (SIGTERM), exit 200"}, summary
    assert not slurm.processes_left(str(tmp_path))


def test_the_script_trains_evaluates_and_exports_on_two_nodes_that_share_only_a_bucket(slurm, tmp_path,
                                                                                       mnist_data_dir, gcs_server,
                                                                                       monkeypatch):
    """The chief and the worker on different nodes, the evaluator beside the chief; model_dir on a bucket (the
    real GCS API server, through the tests' proxy listening inside each node's network namespace on one port, as
    every job gets the submitting environment): checkpoints, evaluations, the export and the tasks' port records
    all in the bucket, the records removed at the job's end. (One job for both: the jobs of the other tests
    train on a disk the nodes share.)"""
    from tests.gcs_netns import NamespaceListener  # pylint: disable=import-outside-toplevel
    from tests.ports import free_loopback_ports  # pylint: disable=import-outside-toplevel

    port = free_loopback_ports(1)[0]  # any number: each node's namespace has its own ports
    listeners = [NamespaceListener(gcs_server.proxy, slurm.hosts.ns[host], port) for host in ("a", "b")]
    try:
        bucket = gcs_server.create_bucket()
        model_dir = f"gs://{bucket}/run"
        yaml_file = tmp_path / "job.yaml"
        yaml_file.write_text(JOB_YAML.format(steps=30, save=10, delay=0))
        script = subprocess.run([sys.executable, "-m", "estimator_mnist", "slurm", "--cluster", str(yaml_file),
                                 "--nodes", "2", "--job-name", "em-bucket", "--data-dir", mnist_data_dir,
                                 "--model-dir", model_dir, "--run-dir", str(tmp_path / "run"), "--",
                                 f"--output={tmp_path / 'job.out'}"], capture_output=True, text=True, cwd=REPO,
                                env={**os.environ, **gcs_server.env()})  # its preflight, from this machine
        assert script.returncode == 0, script.stderr
        (tmp_path / "job.sh").write_text(script.stdout)
        for key, value in listeners[0].env(gcs_server.env()).items():
            monkeypatch.setenv(key, value)  # the job's environment: sbatch exports the submitter's
        result = slurm.run(["sbatch", "--parsable", "--wait", str(tmp_path / "job.sh")], check=False,
                           timeout=WAIT_SECS, cwd=tmp_path)
        job_id = result.stdout.strip().split(";")[0]
        output = job_output(slurm, tmp_path, whole=True)
        assert result.returncode == 0, f"{result.stderr}\n{output}"
        job = slurm.job(job_id)
        assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", job
        assert re.search(r"this is chief:0 \(rank 0 on n1\)", output) and "this is worker:0 (rank 2 on n2)" in output
        assert "evaluation of step" in output and "done: the step's tasks all exited 0" in output
        assert not slurm.processes_left(str(tmp_path))
        for key, value in gcs_server.env().items():
            monkeypatch.setenv(key, value)  # this process reads the bucket from the machine's namespace
        evaluations = read_eval_results(model_dir)
        assert evaluations and evaluations[-1]["final"] and evaluations[-1]["global_step"] >= 30
        assert evaluations[-1]["export"].startswith(model_dir + "/export/latest/")
        names = gcs_server.objects(bucket)
        # The tasks' port and end records were in the bucket too, and went with the job's end.
        assert "run/model.ckpt-30.index" in names and not any(n.startswith(f"run/slurm/{job_id}/") for n in names)
        assert not list(tmp_path.glob("**/gs:*")) and gcs_server.proxy.refused == []
        summary = subprocess.run([sys.executable, "-m", "estimator_mnist", "summary", str(tmp_path / "run")],
                                 capture_output=True, text=True, cwd=REPO)  # its environment reads the bucket
        assert summary.returncode == 0 and "accuracy" in summary.stdout, summary.stdout + summary.stderr
    finally:
        for listener in listeners:
            listener.close()
