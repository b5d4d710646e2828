"""Slurm's own events on the real two-node cluster configured as sites configure it (tests/e2e/slurm_cluster.py:
PreemptType=preempt/partition_prio, GraceTime=60, no send_user_signal, so only the steps get SIGTERM): a job of the
higher-priority partition that asks for a node whole preempts the training job, which saves, requeues itself at
once (REQUEUE mode), resumes and completes with one preemption booked, or ends with one line and resumes when
submitted again (CANCEL mode); that resubmission's second node lost mid-run (its slurmd, slurmstepd and tasks
killed) is requeued by Slurm and named in the summary, the first node's chief leaving at Slurm's SIGTERM since its
peer is gone; a job suspended past its lowered bounds resumes with no restart and no incident. The REQUEUE job
would fail if a stopped task's exit made srun send SIG_TERM_KILL (slurmctld retried it 60 s later into the requeued
run's step: slurm_task_end.py), the suspended one if TF's coordination service kept its 10 s heartbeat timeout
(tf_task/strategy.py)."""

import json
import subprocess
import sys
import time
from datetime import datetime

from estimator_mnist.model_files.checkpoints import latest_step, read_eval_results
from estimator_mnist.model_files.layout import BUDGET_FILE
from tests.e2e.slurm_cluster import CRED_EXPIRE_SECS, SLURMD_TIMEOUT_SECS
from tests.e2e.slurm_events import fail_node, preempt, restore_node, set_preempt_mode
from tests.e2e.test_slurm import GRACE_SECS, JOB_YAML, WAIT_SECS, finished, job_output, wait_for, wait_for_training
from tests.helpers import REPO

STEPS = 60
# Suspension past these (strategy.collective_timeout_secs, launcher.stall_timeout_secs) and past TF's default
# heartbeat timeout (10 s), then resumed.
LOWERED = ("strategy.collective_timeout_secs=20", "launcher.stall_timeout_secs=20")
SUSPEND_SECS = 25


def write_script(slurm, tmp_path, data_dir, overrides=()):
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(JOB_YAML.format(steps=STEPS, save=10, delay=150))
    script = subprocess.run([sys.executable, "-m", "estimator_mnist", "slurm", "--cluster", str(yaml_file),
                             *(a for o in overrides for a in ("--set", o)), "--nodes", "2", "--data-dir", data_dir,
                             "--model-dir", str(tmp_path / "model"), "--run-dir", str(tmp_path / "run"),
                             "--", f"--output={tmp_path / 'job.out'}"], capture_output=True, text=True, check=True,
                            cwd=REPO).stdout
    (tmp_path / "job.sh").write_text(script)
    return slurm.run(["sbatch", "--parsable", str(tmp_path / "job.sh")], cwd=tmp_path).stdout.strip().split(";")[0]


def seconds(stamp):
    return datetime.fromisoformat(stamp).timestamp()


def preempted_after_first_checkpoint(slurm, tmp_path, job_id):
    """The preemptor submitted once the first checkpoint is there; how soon it started after its submission."""
    model_dir, details = str(tmp_path / "model"), lambda: job_output(slurm, tmp_path)
    wait_for(lambda: latest_step(model_dir), WAIT_SECS, "the first checkpoint", details)
    preemptor = preempt(slurm, "n1", tmp_path)
    wait_for(lambda: slurm.job(preemptor).get("StartTime", "Unknown") not in ("Unknown", "None")
             and slurm.job(preemptor)["JobState"] != "PENDING", 120, "the preemptor's start", details)
    state = slurm.job(preemptor)
    return seconds(state["StartTime"]) - seconds(state["SubmitTime"])


def product_lines(output):
    return [line for line in output.splitlines() if line.startswith("estimator-mnist:")]


def test_a_preempted_job_vacates_its_node_at_once_requeues_once_and_completes(slurm, tmp_path, mnist_data_dir):
    """REQUEUE mode: the job's own `scontrol requeue` frees the nodes within preemption_grace_secs; the requeued
    run (the same step ids again) trains to the end untouched."""
    job_id = write_script(slurm, tmp_path, mnist_data_dir)
    details = lambda: job_output(slurm, tmp_path)  # noqa: E731
    started_in = preempted_after_first_checkpoint(slurm, tmp_path, job_id)
    assert started_in <= GRACE_SECS + 10, (started_in, details())
    wait_for(lambda: finished(slurm, job_id), WAIT_SECS + CRED_EXPIRE_SECS, "the requeued job's end", details)
    output, state = job_output(slurm, tmp_path, whole=True), slurm.job(job_id)
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "1", (state, output[-8000:])
    record = json.loads((tmp_path / "model" / BUDGET_FILE).read_text())
    assert len(record["preemptions"]) == 1 and record["incidents"] == [], (record, output[-8000:])
    stop = record["preemptions"][0]["step"]
    assert f"Restoring parameters from {tmp_path / 'model'}/model.ckpt-{stop}" in output, output[-8000:]
    assert not [line for line in product_lines(output) if "error" in line or "submit" in line], output[-8000:]
    assert any("requeueing the job, which resumes from step" in line for line in product_lines(output))
    logs = tmp_path / "run" / "logs" / f"slurm-{job_id}"
    assert sorted(p.name for p in logs.glob("srun-*.err")) == ["srun-0.0.err", "srun-1.0.err"], output[-8000:]
    # Asked to stop, the tasks exited 0 to srun: srun sent no SIG_TERM_KILL that slurmctld could retry later.
    assert "Terminating" not in (logs / "srun-0.0.err").read_text(), output[-8000:]
    assert read_eval_results(str(tmp_path / "model"))[-1]["global_step"] >= STEPS
    assert not (tmp_path / "model" / "slurm" / job_id).exists()  # the step's records went with the job
    assert not slurm.processes_left(str(tmp_path))


def test_a_job_suspended_past_its_bounds_resumes_with_no_restart_and_no_incident(slurm, tmp_path, mnist_data_dir):
    job_id = write_script(slurm, tmp_path, mnist_data_dir, LOWERED)
    details = lambda: job_output(slurm, tmp_path)  # noqa: E731
    wait_for_training(slurm, tmp_path, 3)
    slurm.run(["scontrol", "suspend", job_id])
    time.sleep(SUSPEND_SECS)
    slurm.run(["scontrol", "resume", job_id])
    wait_for(lambda: finished(slurm, job_id), WAIT_SECS, "the resumed job's end", details)
    output, state = job_output(slurm, tmp_path, whole=True), slurm.job(job_id)
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "0", (state, output[-8000:])
    record = json.loads((tmp_path / "model" / BUDGET_FILE).read_text()) if (tmp_path / "model" / BUDGET_FILE).exists() \
        else {"preemptions": [], "incidents": []}
    assert record["preemptions"] == [] and record["incidents"] == [], (record, output[-8000:])
    logs = tmp_path / "run" / "logs" / f"slurm-{job_id}"
    assert sorted(p.name for p in logs.glob("srun-*.err")) == ["srun-0.0.err"], output[-8000:]  # never rerun
    assert "heartbeat timeout" not in output and read_eval_results(str(tmp_path / "model"))[-1]["global_step"] >= STEPS
    assert not slurm.processes_left(str(tmp_path))


def test_a_cancel_mode_preemption_ends_the_job_and_a_resubmission_survives_a_node_failure(slurm, tmp_path,
                                                                                       mnist_data_dir):
    details = lambda: job_output(slurm, tmp_path)  # noqa: E731
    set_preempt_mode(slurm, "cancel")
    try:
        job_id = write_script(slurm, tmp_path, mnist_data_dir)
        started_in = preempted_after_first_checkpoint(slurm, tmp_path, job_id)
        wait_for(lambda: finished(slurm, job_id), 90, "the preempted job's end", details)
    finally:
        set_preempt_mode(slurm, "requeue")
    assert started_in <= GRACE_SECS + 10, (started_in, details())
    output, state = job_output(slurm, tmp_path, whole=True), slurm.job(job_id)
    assert state["Restarts"] == "0" and state["ExitCode"] == "200:0", (state, output[-8000:])
    [line] = [line for line in product_lines(output) if "preempted" in line]
    assert "Slurm preempted the job and cancels it" in line and "PreemptMode=CANCEL" in line, line
    assert f"submit the same script again (sbatch {tmp_path / 'job.sh'})" in line, line
    assert "requeueing" not in output and not (tmp_path / "model" / "slurm" / job_id).exists()
    stop = latest_step(str(tmp_path / "model"))
    # Submitted again: it resumes from that step; its second node lost mid-run, Slurm requeues it.
    again = slurm.run(["sbatch", "--parsable", str(tmp_path / "job.sh")], cwd=tmp_path).stdout.strip().split(";")[0]
    wait_for_training(slurm, tmp_path, stop + 5)
    killed = fail_node(slurm, "n2")
    try:
        assert killed, "nothing ran in n2's namespace"
        wait_for(lambda: slurm.job(again).get("Restarts") == "1", SLURMD_TIMEOUT_SECS * 3, "Slurm's requeue", details)
        # The node stays lost until the job has said why it was requeued, as a node really lost does (the check's
        # slurmd returns 60 s later): one back at once is no longer DOWN when the batch shell asks Slurm.
        wait_for(lambda: "requeued by" in (tmp_path / "job.out").read_text(), 60, "the job's word on it", details)
    finally:
        restore_node(slurm, "n2")
    wait_for(lambda: finished(slurm, again), WAIT_SECS, "the resubmitted job's end", details)
    output, state = job_output(slurm, tmp_path, whole=True), slurm.job(again)
    assert state["JobState"] == "COMPLETED", (state, output[-8000:])
    assert f"Restoring parameters from {tmp_path / 'model'}/model.ckpt-{stop}" in output, output[-8000:]
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["status"] == "finished" and summary["slurm"]["job_id"] == again, summary
    assert [e["what"].split(" (")[0] for e in summary["slurm"]["events"]] == ["requeued by Slurm after a node "
                                                                            "failure"], (summary, slurm.logs())
    assert "(n2 DOWN" in summary["slurm"]["events"][0]["what"], summary
    # n1's chief, its peer gone, left at Slurm's SIGTERM rather than at the end of the grace.
    assert "task chief:0: the training session was lost after SIGTERM (a peer left)" in output, output[-8000:]
    assert not slurm.processes_left(str(tmp_path))
