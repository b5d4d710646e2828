"""A SIGTERM to a Slurm batch shell: a cancel is final, a warning of the job's end requeues it
(supervise/slurm_job_state.py), as Slurm 22.05's `scontrol -o show job` shows each (read on the test cluster)."""

import subprocess

import pytest

from estimator_mnist.supervise.slurm_job_state import (CANCELLED, PREEMPTED_CANCEL, REQUEUE, RERUN, SLURM_REQUEUED,
                                                       SlurmFacts, job_fields, main, nodes_down, preempt_mode,
                                                       verdict)

# `scontrol -o show job` fields, as Slurm 22.05 shows them in the batch shell (its source; the test cluster).
AFTER_SCANCEL = {"JobState": "COMPLETING", "Reason": "None", "PreemptTime": "None", "Restarts": "0"}
AFTER_BATCH_SIGNAL = {"JobState": "RUNNING", "Reason": "None", "PreemptTime": "None", "Restarts": "0"}
IN_GRACE = {**AFTER_BATCH_SIGNAL, "PreemptTime": "2026-11-28T00:10:00", "Partition": "em"}
REQUEUED = {**AFTER_SCANCEL, "Restarts": "1"}  # PENDING|COMPLETING prints COMPLETING; Restarts counted at once


def facts(mode=None, down=(), restarts=0):
    return SlurmFacts(restarts, lambda partition: mode, lambda nodelist: list(down), "n[1-2]")


@pytest.mark.parametrize("fields, signalled, word", [
    (AFTER_SCANCEL, True, CANCELLED),
    (AFTER_SCANCEL, False, CANCELLED),  # the step ended before the batch shell's trap ran
    ({**AFTER_SCANCEL, "JobState": "CANCELLED"}, True, CANCELLED),
    (AFTER_BATCH_SIGNAL, True, REQUEUE),  # --signal=B:TERM@N before the time limit, scancel --batch --signal=TERM
    (AFTER_BATCH_SIGNAL, False, RERUN),  # scancel --signal=TERM to the steps, or a task failed
    ({**AFTER_SCANCEL, "Reason": "TimeLimit"}, True, REQUEUE),  # the limit reached before the step stopped
    ({**AFTER_SCANCEL, "JobState": "TIMEOUT"}, True, REQUEUE),
    ({**AFTER_SCANCEL, "JobState": "PENDING"}, True, SLURM_REQUEUED),
    (None, True, REQUEUE),  # scontrol unreachable: the old behaviour
    (None, False, RERUN),
])
def test_the_job_s_state_tells_a_cancel_from_a_warning(fields, signalled, word):
    assert verdict(fields, facts(), signalled)[0] == word


@pytest.mark.parametrize("mode, signalled, word", [
    ("REQUEUE", False, REQUEUE), ("REQUEUE", True, REQUEUE),  # without and with send_user_signal
    ("CANCEL", False, PREEMPTED_CANCEL), ("CANCEL", True, PREEMPTED_CANCEL),
    (None, False, REQUEUE),  # the partition unread: taken for REQUEUE, saying so
])
def test_a_preemption_within_its_grace_follows_the_partition_s_preempt_mode(mode, signalled, word):
    got, why = verdict(IN_GRACE, facts(mode), signalled)
    assert got == word and "preempted by Slurm (partition em: " in why, why


def test_a_preemption_past_its_grace_is_slurm_s_requeue_or_its_cancel():
    assert verdict({**IN_GRACE, "JobState": "COMPLETING", "Restarts": "1"}, facts("REQUEUE"))[1].endswith(
        "preempted and requeued by Slurm at its grace time's end (PreemptMode=REQUEUE)")
    assert verdict({**IN_GRACE, "JobState": "COMPLETING"}, facts("CANCEL"))[0] == PREEMPTED_CANCEL


@pytest.mark.parametrize("fields, down, event", [
    (REQUEUED, ["n2 DOWN+NOT_RESPONDING"], "requeued by Slurm after a node failure (n2 DOWN+NOT_RESPONDING)"),
    (REQUEUED, [], "requeued by an operator (scontrol requeue)"),
    ({**REQUEUED, "Reason": "JobHeldUser"}, [], "requeued and held (scontrol requeuehold): it resumes once released"),
])
def test_a_requeue_by_slurm_or_an_operator_is_named_never_cancelled(fields, down, event):
    word, why = verdict(fields, facts(down=down))
    assert word == SLURM_REQUEUED and event in why, why
    assert verdict(fields, facts(down=down, restarts=1))[0] == CANCELLED  # the same state, no requeue since


def test_a_node_failure_is_read_on_this_run_s_nodes_not_the_requeued_job_s_nodelist():
    asked = []
    facts = SlurmFacts(0, lambda partition: None, lambda nodes: asked.append(nodes) or ["n2 DOWN*"], "n[1-2]")
    assert "node failure (n2 DOWN*)" in verdict({**REQUEUED, "NodeList": "(null)"}, facts)[1]
    assert asked == ["n[1-2]"]


def test_the_verdict_says_what_it_saw():
    assert verdict(AFTER_SCANCEL, facts()) == (CANCELLED, "JobState=COMPLETING Reason=None Restarts=0: cancelled "
                                                          "(scancel)")
    assert "could not be read from scontrol" in verdict(None)[1]


def test_partitions_and_nodes_are_read_from_scontrol():
    def run(command, **_):
        out = {"partition": "PartitionName=em PriorityTier=1 PreemptMode=CANCEL GraceTime=60\n",
               "node": "NodeName=n1 State=ALLOCATED\nNodeName=n2 State=DOWN+NOT_RESPONDING\nNodeName=n3 State=IDLE*\n"}
        return subprocess.CompletedProcess(command, 0, out[command[3]], "")

    assert preempt_mode("em", run) == "CANCEL"
    assert nodes_down("n[1-3]", run) == ["n2 DOWN+NOT_RESPONDING", "n3 IDLE*"]
    assert preempt_mode("em", lambda c, **_: subprocess.CompletedProcess(c, 1, "", "Invalid partition")) is None


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
    assert capsys.readouterr().out.startswith("requeue its state could not be read from scontrol")  # signalled
