"""The batch script's exit contract, run by bash with stand-ins for srun, scancel and scontrol on PATH: 0 ends
the job, 200 reruns the step within restart.max_restarts as the job's restart budget counts them, 1 and 2 end
the job with that code and one line, and a SIGTERM to the batch shell stops the step and requeues the job when
the step's code is retryable. The real Slurm runs are in tests/e2e/test_slurm.py."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from estimator_mnist.model_files.layout import BUDGET_FILE

from tests.helpers import REPO

# srun: prepare-data succeeds; each train step exits with the next code of $FAKE/codes. srun's status is 143 for
# a failed step (--kill-on-bad-exit), 0 for tasks asked to stop that said 200 (slurm_task_end.srun_code).
FAKE_SRUN = """#!/bin/bash
case " $* " in *" prepare-data "*) exit 0 ;; esac
n=$(wc -l < "$FAKE/steps")
echo step >> "$FAKE/steps"
code=$(sed -n "$((n + 1))p" "$FAKE/codes")
echo "srun $*" >> "$FAKE/calls"
said() {  # each task's word, as train's parent publishes it when asked to stop (slurm_task_end.py)
  mkdir -p "$FAKE/model/slurm/$SLURM_JOB_ID"
  for r in 0 1 2; do
    echo "{\\"step\\": \\"attempt $ESTIMATOR_MNIST_SLURM_ATTEMPT\\", \\"rank\\": $r, \\"signal\\": \\"SIGTERM\\", \\"code\\": 200}" \\
      > "$FAKE/model/slurm/$SLURM_JOB_ID/end-rank-$r.json"
  done
}
case "$code" in wait*)  # runs until SIGTERM, then its tasks end with the code after "wait" (200 by default)
  end=${code#wait}; end=${end:-200}
  if [ "$end" = 0 ]; then trap 'exit 0' TERM
  elif [ "$end" = 200 ]; then trap 'said; exit 0' TERM  # asked to stop: 0 to srun, 200 in each task's record
  else trap 'said; echo "srun: error: n1: task 0: Exited with exit code '"$end"'" >&2; exit 143' TERM; fi
  echo $$ > "$FAKE/running"; while :; do sleep 0.1; done ;;
esac
[ "$code" = 0 ] && exit 0
echo "srun: error: n2: task 2: Exited with exit code $code" >&2
echo "srun: error: n1: tasks 0-1: Terminated" >&2
exit 143
"""
FAKE_SCANCEL = '#!/bin/bash\necho "scancel $*" >> "$FAKE/calls"\n'
RUNNING = "JobState=RUNNING Reason=None Restarts=0 PreemptTime=None"
# scontrol, as Slurm 22.05 prints for the job in the batch shell (read from its source and the test cluster): the
# job's fields from $FAKE/job (RUNNING, not preempted, by default), the partition's PreemptMode from
# $FAKE/preempt_mode, the nodes' states from $FAKE/nodes; `requeue` succeeds, or with $FAKE/requeue_error fails
# with its text, and with $FAKE/requeued_meanwhile shows the job requeued by Slurm after the failure.
FAKE_SCONTROL = r"""#!/bin/bash
echo "scontrol $*" >> "$FAKE/calls"
case "$1 $2 $3" in
  "show config "*) [ -e "$FAKE/mpi_ports" ] && echo "MpiParams               = ports=20000-20999"
    [ -e "$FAKE/user_signal" ] && echo "PreemptParameters       = send_user_signal"; exit 0 ;;
  "-o show job") echo "JobId=$4 JobName=job $(cat "$FAKE/job" 2>/dev/null || echo "$RUNNING") Partition=em" \
    "Command=$FAKE/job.sh"; exit 0 ;;
  "-o show partition") echo "PartitionName=$4 PreemptMode=$(cat "$FAKE/preempt_mode" 2>/dev/null || echo OFF)" \
    "GraceTime=60"; exit 0 ;;
  "-o show node") cat "$FAKE/nodes" 2>/dev/null || printf 'NodeName=n1 State=ALLOCATED\nNodeName=n2 State=ALLOCATED\n'
    exit 0 ;;
esac
if [ "$1" = requeue ] && [ -e "$FAKE/requeue_error" ]; then
  [ -e "$FAKE/requeued_meanwhile" ] && cp "$FAKE/requeued_meanwhile" "$FAKE/job"
  echo "scontrol: error: $(cat "$FAKE/requeue_error")" >&2; exit 1
fi
exit 0
""".replace("$RUNNING", RUNNING)
PREEMPTED = "JobState=RUNNING Reason=None Restarts=0 PreemptTime=2026-11-28T10:00:00"
CANCELLED = "JobState=COMPLETING Reason=None Restarts=0 PreemptTime=None"
REQUEUED = "JobState=COMPLETING Reason=None Restarts=1 PreemptTime=None"


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL), ("scancel", FAKE_SCANCEL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "steps").write_text("")
    script = subprocess.run([sys.executable, "-m", "estimator_mnist", "slurm", "--cluster", "config/local.yaml",
                             "--set", "restart.max_restarts=2", "--run-dir", str(tmp_path / "run"),
                             "--model-dir", str(tmp_path / "model")],
                            capture_output=True, text=True, check=True, cwd=REPO).stdout
    (tmp_path / "job.sh").write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": str(tmp_path), "SLURM_JOB_ID": "77",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "n[1-2]"}
    return tmp_path, env


def run_script(fake, codes, timeout=60):
    tmp_path, env = fake
    (tmp_path / "codes").write_text("\n".join(codes) + "\n")
    return subprocess.run(["bash", str(tmp_path / "job.sh")], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=tmp_path)


def steps_run(fake):
    return len((fake[0] / "steps").read_text().splitlines())


def test_success_ends_the_job_with_0(fake):
    result = run_script(fake, ["0"])
    assert result.returncode == 0 and "done: the step's tasks all exited 0" in result.stdout, result.stdout
    assert steps_run(fake) == 1


def incidents(fake):
    record = json.loads((fake[0] / "model" / BUDGET_FILE).read_text())
    assert record["job"] == "slurm-77", record
    return record["incidents"]


def test_a_retryable_exit_reruns_the_step(fake):
    result = run_script(fake, ["200", "0"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "estimator-mnist: the step exited 200 (retryable): restart 1/2 of job slurm-77" in result.stdout
    assert steps_run(fake) == 2 and len(incidents(fake)) == 1  # the step's several failed tasks: one incident


def test_the_restart_budget_runs_out_with_exit_1_and_one_line(fake):
    result = run_script(fake, ["200", "200", "200", "0"])
    assert result.returncode == 1 and steps_run(fake) == 3
    errors = [line for line in result.stdout.splitlines() if "error" in line]
    assert len(errors) == 1 and "restart budget is used up: job slurm-77 failed 3 times in a row " \
        "without a newer checkpoint (restart.max_restarts=2)" in errors[0], result.stdout
    assert len(incidents(fake)) == 3


def test_a_requeued_job_keeps_its_count_and_a_new_job_starts_afresh(fake):
    tmp_path, env = fake
    run_script(fake, ["200", "200", "0"])  # two reruns, then (say) preempted and requeued
    (tmp_path / "steps").write_text("")
    result = run_script((tmp_path, {**env, "SLURM_RESTART_COUNT": "1"}), ["200", "0"])
    assert result.returncode == 1 and "failed 3 times in a row" in result.stdout, result.stdout
    (tmp_path / "steps").write_text("")
    result = run_script((tmp_path, {**env, "SLURM_JOB_ID": "78"}), ["200", "0"])  # the script submitted again
    assert result.returncode == 0 and "restart 1/2 of job slurm-78" in result.stdout, result.stdout


@pytest.mark.parametrize("code", ["1", "2"])
def test_a_permanent_or_usage_failure_ends_the_job_with_its_code(fake, code):
    result = run_script(fake, [code, "0"])
    assert result.returncode == int(code) and steps_run(fake) == 1
    assert f"estimator-mnist: error: a task exited {code}; the job ends with it" in result.stdout


def stop_the_step(fake, step_ends, batch=True, job=None, mode=None):
    """Slurm's SIGTERM while a step runs: to the batch shell too when `batch` (a cancel, a requeue, a time limit's
    --signal=B:TERM, send_user_signal), then to the step, whose tasks end with `step_ends` (200: stopped). `job`:
    the job's fields scontrol shows from then on; `mode`: the partition's PreemptMode."""
    tmp_path, env = fake
    (tmp_path / "codes").write_text(f"wait{step_ends}\n0\n")
    if mode:
        (tmp_path / "preempt_mode").write_text(mode)
    proc = subprocess.Popen(["bash", str(tmp_path / "job.sh")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "running").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if job:
            (tmp_path / "job").write_text(job)  # as slurmctld sets it before it signals anything
        if batch:
            proc.send_signal(signal.SIGTERM)  # to the batch shell only, as --signal=B:TERM and scancel --batch do
            time.sleep(0.5)
        # The stand-in scancel only records; end the step as Slurm would, with SIGTERM to its tasks.
        os.kill(int((tmp_path / "running").read_text()), signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, (tmp_path / "calls").read_text()


def summary_of(fake):
    return json.loads((fake[0] / "run" / "run_summary.json").read_text())


def test_a_signalled_batch_shell_stops_the_step_and_requeues(fake):
    """A time limit's warning (--signal=B:TERM@N) or scancel --batch: RUNNING, not preempted."""
    code, out, calls = stop_the_step(fake, 200)
    assert "scancel --signal=TERM 77" in calls and "scontrol requeue 77" in calls
    assert code == 0 and "requeueing the job" in out and steps_run(fake) == 1


def test_a_user_s_scancel_signal_to_the_steps_reruns_the_step(fake):
    code, out, calls = stop_the_step(fake, 200, batch=False)
    assert code == 0 and steps_run(fake) == 2 and "scontrol requeue" not in calls, out
    assert "scontrol -o show job 77" in calls and "running it again" in out, out


def test_a_cancelled_job_is_not_requeued_and_its_summary_says_cancelled(fake):
    (fake[0] / "model" / "slurm" / "77").mkdir(parents=True)  # the step's records: gone with the job
    code, out, calls = stop_the_step(fake, 200, job=CANCELLED)
    assert "scontrol -o show job 77" in calls and "scontrol requeue" not in calls and "requeueing" not in out, out
    assert code == 0 and "cancelled (JobState=COMPLETING Reason=None Restarts=0: cancelled (scancel)): signalled; " \
        "the step's tasks stopped with 200; not requeued: a cancel is final" in out and steps_run(fake) == 1
    summary = summary_of(fake)
    assert summary["status"].startswith("cancelled (scancel)") and summary["slurm"]["cancelled"] is True
    assert not (fake[0] / "model" / "slurm" / "77").exists()


# Slurm's preemption, as sites configure it: the partition's PreemptMode, with or without send_user_signal
# (whether the batch shell gets SIGTERM), with a GraceTime (the job still RUNNING, PreemptTime set: the script
# acts) or without (Slurm requeued or killed the job at once: Restarts=1, or COMPLETING, before any signal).
@pytest.mark.parametrize("mode", ["REQUEUE", "CANCEL"])
@pytest.mark.parametrize("send_user_signal", [False, True])
@pytest.mark.parametrize("grace", [60, 0])
def test_a_preemption_requeues_in_requeue_mode_and_ends_the_job_in_cancel_mode(fake, mode, send_user_signal, grace):
    if grace:
        job = PREEMPTED
    else:
        job = PREEMPTED.replace("RUNNING", "COMPLETING").replace("Restarts=0", f"Restarts={int(mode == 'REQUEUE')}")
    code, out, calls = stop_the_step(fake, 200, batch=send_user_signal or not grace, job=job, mode=mode)
    lines = [line for line in out.splitlines() if line.startswith("estimator-mnist:")]
    assert steps_run(fake) == 1, out  # never another step once preempted
    assert not [line for line in lines if "error" in line or "resubmit" in line], out
    record = json.loads((fake[0] / "model" / BUDGET_FILE).read_text()) if grace else None
    if grace:  # the stop booked: a preemption, never an incident
        assert len(record["preemptions"]) == 1 and record["incidents"] == [], record
    if mode == "REQUEUE":
        assert code == 0 and ("scontrol requeue 77" in calls) == bool(grace), (calls, out)
        said = "requeueing the job, which resumes from step" if grace else "preempted and requeued by Slurm at its " \
            "grace time's end (PreemptMode=REQUEUE): it resumes from step"
        assert said in out, out
        assert summary_of(fake)["slurm"]["event"] == ("requeue" if grace else "slurm-requeued")
    else:
        assert code == 200 and "scontrol requeue" not in calls, (calls, out)
        [line] = [line for line in lines if "preempted" in line]
        assert "Slurm preempted the job and cancels it (preempted by Slurm (partition em: PreemptMode=CANCEL)): " \
            f"not requeued; it stopped at step None, saved: to resume from it, submit the same script again " \
            f"(sbatch {fake[0] / 'job.sh'})" in line, line
        summary = summary_of(fake)
        assert summary["slurm"]["event"] == "preempted-cancel" and "not requeued" in summary["status"], summary


@pytest.mark.parametrize("send_user_signal", [False, True])
def test_the_warning_after_a_preemption_signals_the_steps_only_where_slurm_did_not(fake, send_user_signal):
    """Without send_user_signal Slurm SIGTERMs the steps at the grace's start, and the batch shell's --signal
    warning follows (the grace brings the job's end near): a second SIGTERM would end the tasks at once."""
    if send_user_signal:
        (fake[0] / "user_signal").write_text("")
    code, out, calls = stop_the_step(fake, 200, job=PREEMPTED, mode="REQUEUE")
    assert ("scancel --signal=TERM 77" in calls) == send_user_signal, calls
    assert code == 0 and "scontrol requeue 77" in calls and "requeueing the job" in out, out


@pytest.mark.parametrize("job, nodes, event", [
    (REQUEUED, "NodeName=n1 State=ALLOCATED\nNodeName=n2 State=DOWN+NOT_RESPONDING\n",
     "requeued by Slurm after a node failure (n2 DOWN+NOT_RESPONDING)"),
    (REQUEUED, None, "requeued by an operator (scontrol requeue)"),
    (REQUEUED.replace("Reason=None", "Reason=JobHeldUser"), None, "requeued and held (scontrol requeuehold)"),
])
def test_a_job_slurm_or_an_operator_requeued_is_left_to_resume_and_named(fake, job, nodes, event):
    if nodes:
        (fake[0] / "nodes").write_text(nodes.replace("\\n", "\n"))
    code, out, calls = stop_the_step(fake, 200, job=job)
    assert code == 0 and "scontrol requeue" not in calls and steps_run(fake) == 1, (calls, out)
    assert event in out and "cancel" not in out, out
    summary = summary_of(fake)
    assert summary["status"].startswith(event) and summary["slurm"]["event"] == "slurm-requeued", summary
    assert [e["what"][:len(event)] for e in summary["slurm"]["events"]] == [event], summary  # one requeue, one


def test_a_requeue_slurm_was_first_to_do_is_no_error(fake):
    """scontrol requeue fails with ESLURM_JOB_PENDING when Slurm requeued the job meanwhile (its grace's end)."""
    (fake[0] / "requeue_error").write_text("Requeue of JobId=77 returned an error: Job is pending execution")
    (fake[0] / "requeued_meanwhile").write_text(PREEMPTED.replace("Restarts=0", "Restarts=1"))
    code, out, calls = stop_the_step(fake, 200, batch=False, job=PREEMPTED, mode="REQUEUE")
    assert code == 0 and "scontrol requeue 77" in calls and "error" not in out, out
    assert "preempted and requeued by Slurm at its grace time's end (PreemptMode=REQUEUE): it resumes" in out, out


def test_a_requeue_refused_says_so_once_and_ends_the_job_with_200(fake):
    (fake[0] / "requeue_error").write_text("Requeue of JobId=77 returned an error: Requeue of job is disabled")
    code, out, _ = stop_the_step(fake, 200, batch=False, job=PREEMPTED, mode="REQUEUE")
    errors = [line for line in out.splitlines() if "error" in line]
    assert code == 200 and len(errors) == 1 and "scontrol requeue 77 failed (Requeue of JobId=77 returned an " \
        "error: Requeue of job is disabled)" in errors[0] and "submit the script again" in errors[0], out


@pytest.mark.parametrize("step_ends", [0, 1, 2])
def test_a_signal_that_meets_a_final_outcome_does_not_requeue(fake, step_ends):
    """The step finished (0) or failed for good (1, 2) as the signal came: the job ends with that code."""
    (fake[0] / "model" / "slurm" / "77").mkdir(parents=True)
    code, out, calls = stop_the_step(fake, step_ends)
    assert code == step_ends and "scontrol requeue" not in calls and "requeueing" not in out, out
    assert f"but the step's code is {step_ends}: not requeued" in out and steps_run(fake) == 1
    assert not (fake[0] / "model" / "slurm" / "77").exists()  # the job ended: its records with it


@pytest.mark.parametrize("reserves", [True, False])
def test_the_step_asks_for_slurm_s_reserved_ports_where_the_cluster_reserves_them(fake, reserves):
    if reserves:
        (fake[0] / "mpi_ports").write_text("")
    assert run_script(fake, ["0"]).returncode == 0
    [step] = [line for line in (fake[0] / "calls").read_text().splitlines() if line.startswith("srun ") and " train " in line]
    assert ("--resv-ports=3" in step.split()) == reserves, step
