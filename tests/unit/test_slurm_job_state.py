"""A SIGTERM to a Slurm batch shell: a cancel is final, a warning of the job's end requeues it
(supervise/slurm_job_state.py), as Slurm 22.05's `scontrol -o show job` shows each (read on the test cluster)."""

import subprocess

import pytest

from estimator_mnist.supervise.slurm_job_state import (CANCELLED, REQUEUE, SLURM_REQUEUES, job_fields, main,
                                                       verdict)

# `scontrol -o show job` fields, as seen on the real cluster (tests/e2e/slurm_cluster.py) in the batch shell's trap.
AFTER_SCANCEL = {"JobState": "COMPLETING", "Reason": "None", "PreemptTime": "None"}
AFTER_BATCH_SIGNAL = {"JobState": "RUNNING", "Reason": "None", "PreemptTime": "None"}


@pytest.mark.parametrize("fields, word", [
    (AFTER_SCANCEL, CANCELLED),
    ({**AFTER_SCANCEL, "JobState": "CANCELLED"}, CANCELLED),
    (AFTER_BATCH_SIGNAL, REQUEUE),  # --signal=B:TERM@N before the time limit, scancel --batch --signal=TERM
    ({**AFTER_BATCH_SIGNAL, "PreemptTime": "2026-11-28T00:10:00"}, REQUEUE),  # a preemption's grace
    ({**AFTER_SCANCEL, "Reason": "TimeLimit"}, REQUEUE),  # the limit reached before the step stopped
    ({**AFTER_SCANCEL, "PreemptTime": "2026-11-28T00:10:00"}, REQUEUE),  # preempted past its grace
    ({**AFTER_SCANCEL, "JobState": "TIMEOUT"}, REQUEUE),
    ({**AFTER_SCANCEL, "JobState": "PENDING"}, SLURM_REQUEUES),  # PreemptMode=REQUEUE: Slurm does it
    (None, REQUEUE),  # scontrol unreachable: the old behaviour
])
def test_the_job_s_state_tells_a_cancel_from_a_warning(fields, word):
    assert verdict(fields)[0] == word


def test_the_verdict_says_what_it_saw():
    assert verdict(AFTER_SCANCEL) == (CANCELLED, "JobState=COMPLETING Reason=None: cancelled (scancel)")
    assert "could not be read from scontrol" in verdict(None)[1]


def test_scontrol_s_line_is_read_and_its_failure_is_none():
    line = "JobId=5 JobName=em UserId=root(0) JobState=COMPLETING Reason=None Dependency=(null) PreemptTime=None\n"

    def run(command, **_):
        assert command == ["scontrol", "-o", "show", "job", "5"]
        return subprocess.CompletedProcess(command, 0, line, "")

    assert job_fields("5", run)["JobState"] == "COMPLETING"
    assert job_fields("5", lambda c, **_: subprocess.CompletedProcess(c, 1, "", "Invalid job id")) is None

    def missing(command, **_):
        raise FileNotFoundError(2, "No such file", "scontrol")

    assert job_fields("5", missing) is None


def test_the_batch_script_reads_one_word_first(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol: taken for a preemption, as before
    assert main(["5"]) == 0
    assert capsys.readouterr().out.startswith("requeue its state could not be read from scontrol")
