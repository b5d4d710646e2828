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

# srun: prepare-data succeeds; each train step exits with the next code of $FAKE/codes. srun's own status is
# 143 for a failed step, as with --kill-on-bad-exit (the other tasks are ended by SIGTERM).
FAKE_SRUN = """#!/bin/bash
case " $* " in *" prepare-data "*) exit 0 ;; esac
n=$(wc -l < "$FAKE/steps")
echo step >> "$FAKE/steps"
code=$(sed -n "$((n + 1))p" "$FAKE/codes")
echo "srun $*" >> "$FAKE/calls"
case "$code" in wait*)  # runs until SIGTERM, then its tasks end with the code after "wait" (200 by default)
  end=${code#wait}; end=${end:-200}
  if [ "$end" = 0 ]; then trap 'exit 0' TERM
  else trap 'echo "srun: error: n1: task 0: Exited with exit code '"$end"'" >&2; exit 143' TERM; fi
  echo $$ > "$FAKE/running"; while :; do sleep 0.1; done ;;
esac
[ "$code" = 0 ] && exit 0
echo "srun: error: n2: task 2: Exited with exit code $code" >&2
echo "srun: error: n1: tasks 0-1: Terminated" >&2
exit 143
"""
FAKE_SCANCEL = '#!/bin/bash\necho "scancel $*" >> "$FAKE/calls"\n'
FAKE_SCONTROL = ('#!/bin/bash\necho "scontrol $*" >> "$FAKE/calls"\n'
                 '[ "$*" = "show config" ] && [ -e "$FAKE/mpi_ports" ] && echo "MpiParams               = ports=20000-20999"\n'
                 # The job's state as Slurm 22.05 shows it in the batch shell's trap: RUNNING after a warning
                 # (time limit, preemption, scancel --batch), COMPLETING after a plain scancel.
                 '[ "$1 $2 $3" = "-o show job" ] && echo "JobId=$4 JobState=$(cat "$FAKE/job_state" 2>/dev/null || '
                 'echo RUNNING) Reason=None PreemptTime=None"\n'
                 'exit 0\n')


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


def signal_the_batch_shell(fake, step_ends):
    """SIGTERM to the batch shell while a step runs, whose tasks then end with `step_ends` (200: stopped)."""
    tmp_path, env = fake
    (tmp_path / "codes").write_text(f"wait{step_ends}\n0\n")
    proc = subprocess.Popen(["bash", str(tmp_path / "job.sh")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "running").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # to the batch shell only, as --signal=B:TERM and scancel --batch do
        time.sleep(0.5)
        # The stand-in scancel only records; end the step as Slurm would, with SIGTERM to its tasks.
        os.kill(int((tmp_path / "running").read_text()), signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, (tmp_path / "calls").read_text()


def test_a_signalled_batch_shell_stops_the_step_and_requeues(fake):
    code, out, calls = signal_the_batch_shell(fake, 200)
    assert "scancel --signal=TERM 77" in calls and "scontrol requeue 77" in calls
    assert code == 0 and "requeueing the job" in out and steps_run(fake) == 1


def test_a_cancelled_job_is_not_requeued_and_its_summary_says_cancelled(fake):
    (fake[0] / "job_state").write_text("COMPLETING\n")  # a plain scancel: CANCELLED|COMPLETING
    code, out, calls = signal_the_batch_shell(fake, 200)
    assert "scontrol -o show job 77" in calls and "scontrol requeue" not in calls and "requeueing" not in out, out
    assert code == 0 and "cancelled (JobState=COMPLETING Reason=None: cancelled (scancel)): the step's tasks stopped " \
        "with 200; not requeued: a cancel is final" in out and steps_run(fake) == 1
    summary = json.loads((fake[0] / "run" / "run_summary.json").read_text())
    assert summary["status"].startswith("cancelled (scancel)") and summary["slurm"]["cancelled"] is True


@pytest.mark.parametrize("step_ends", [0, 1, 2])
def test_a_signal_that_meets_a_final_outcome_does_not_requeue(fake, step_ends):
    """The step finished (0) or failed for good (1, 2) as the signal came: the job ends with that code."""
    code, out, calls = signal_the_batch_shell(fake, step_ends)
    assert code == step_ends and "scontrol requeue" not in calls and "requeueing" not in out, out
    assert f"but the step's code is {step_ends}: not requeued" in out and steps_run(fake) == 1


@pytest.mark.parametrize("reserves", [True, False])
def test_the_step_asks_for_slurm_s_reserved_ports_where_the_cluster_reserves_them(fake, reserves):
    if reserves:
        (fake[0] / "mpi_ports").write_text("")
    assert run_script(fake, ["0"]).returncode == 0
    [step] = [line for line in (fake[0] / "calls").read_text().splitlines() if line.startswith("srun ") and " train " in line]
    assert ("--resv-ports=3" in step.split()) == reserves, step
