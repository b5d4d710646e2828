"""The restart budget (restart_budget.py): one owner of restart bookkeeping for launch and cluster managers."""

import json

import pytest

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.errors import PermanentFailure
from estimator_mnist.model_files.budget_record import ERR_BOTH, LAST_GOOD, MSG_KEPT_ASIDE
from estimator_mnist.model_files.layout import BUDGET_FILE, MARK_FILE
from estimator_mnist.model_files.preemption_mark import write_mark
from estimator_mnist.supervise.restart_budget import (ERR_BUDGET, JOB_ID_ENV, Job, RestartBudget, budget_line,
                                                      check_start, job_of)
from tests.helpers import error_pattern

CLUSTER = config_from_dict({"cluster": {"chief": ["a:1"], "worker": ["b:1"], "evaluator": "c"}}, "t").cluster
NO_CHIEF = config_from_dict({"cluster": {"worker": ["a:1", "b:1"]}}, "t").cluster
OPERATOR = {"environment": "cloud", "cluster": {"chief": ["mnist-chief-0.team-a.svc:2222"],
                                                "worker": ["mnist-worker-0.team-a.svc:2222"]}}
JOB = Job("tfjob-team-a-mnist", "the operator's TF_CONFIG")


@pytest.mark.parametrize("environ, tf_config, expected", [
    ({JOB_ID_ENV: "team-a/mnist/3f2a"}, OPERATOR, Job("team-a/mnist/3f2a", JOB_ID_ENV)),
    ({"SLURM_JOB_ID": "4711"}, None, Job("slurm-4711", "SLURM_JOB_ID", starts_count=False)),
    ({}, OPERATOR, JOB),
    ({}, {"cluster": {"chief": ["host-a:2222"]}}, None),  # TF_CONFIG by hand: nobody restarts these tasks
    ({}, None, None),                                       # launch (--task) or a single process
])
def test_the_job_s_identity_comes_from_its_cluster_manager(environ, tf_config, expected):
    assert job_of(environ, tf_config) == expected


def starts(tmp_path, task, times, max_restarts=3, job=JOB, cluster=CLUSTER):
    return [check_start(task, cluster, job, max_restarts, str(tmp_path)) for _ in range(times)]


def test_the_writer_s_restarts_without_progress_are_incidents_until_the_budget_is_used_up(tmp_path):
    incidents = starts(tmp_path, TaskId("chief", 0), 4)  # the first start and restart.max_restarts=3 restarts
    assert incidents[0] is None and [i["number"] for i in incidents[1:]] == [1, 2, 3]
    assert [i["in_a_row"] for i in incidents[1:]] == [1, 2, 3]
    with pytest.raises(PermanentFailure, match=error_pattern(ERR_BUDGET)) as refused:
        check_start(TaskId("chief", 0), CLUSTER, JOB, 3, str(tmp_path))
    message = str(refused.value)
    assert "job tfjob-team-a-mnist failed 4 times in a row without a newer checkpoint (restart.max_restarts=3)" \
        in message
    assert "#4 at" in message and "(no checkpoint yet)" in message and "\n" not in message
    record = json.loads((tmp_path / BUDGET_FILE).read_text())
    assert record["job"] == JOB.key and record["starts"] == 5 and len(record["incidents"]) == 4
    assert json.loads((tmp_path / (BUDGET_FILE + LAST_GOOD)).read_text()) == record


def test_a_failure_after_a_newer_checkpoint_begins_the_count_again(tmp_path):
    chief = TaskId("chief", 0)
    for step in (None, 10, 20, 30, 40, 50, 60):  # a fault now and then, each after progress: never ends the job
        event = check_start(chief, CLUSTER, JOB, 1, str(tmp_path), resumes_from=step)
        assert event is None or (event["in_a_row"] == 1 and event["newer_checkpoint"]), event
    with pytest.raises(PermanentFailure, match="failed 2 times in a row"):  # no progress since: 2 in a row
        check_start(chief, CLUSTER, JOB, 1, str(tmp_path), resumes_from=60)


def test_a_preemption_with_its_stop_step_saved_is_never_an_incident(tmp_path):
    chief = TaskId("chief", 0)
    check_start(chief, CLUSTER, JOB, 0, str(tmp_path), resumes_from=None)
    for step in (10, 20, 30, 40, 50):  # restart.max_restarts: 0, and five preemptions
        write_mark(str(tmp_path), step, "chief:0")
        event = check_start(chief, CLUSTER, JOB, 0, str(tmp_path), resumes_from=step)
        assert event["step"] == step and "not counted" in event["what"]
        assert not (tmp_path / MARK_FILE).exists()
    budget = RestartBudget(JOB, 0, str(tmp_path))
    assert budget.incidents == [] and len(budget.preemptions) == 5 and not budget.exhausted
    assert budget_line(budget.preemptions[-1], JOB.key, 0) == \
        "job tfjob-team-a-mnist resumes after preemption 5 (preempted at step 50: not counted)"


def test_a_mark_whose_step_is_not_the_newest_checkpoint_counts_as_a_failure(tmp_path):
    """The stop step's checkpoint was not saved (or was moved aside as damaged): the stop lost work."""
    chief = TaskId("chief", 0)
    check_start(chief, CLUSTER, JOB, 3, str(tmp_path), resumes_from=10)
    write_mark(str(tmp_path), 20, "chief:0")
    event = check_start(chief, CLUSTER, JOB, 3, str(tmp_path), resumes_from=10)
    assert event["number"] == 1 and event["in_a_row"] == 1 and not event["newer_checkpoint"]
    assert not (tmp_path / MARK_FILE).exists()


@pytest.mark.parametrize("damage", [b"{torn", b"", b"[]", b'{"job": 3}', b"\xff\xfe"])
def test_an_unreadable_record_is_kept_aside_and_the_count_goes_on_from_its_last_good_copy(tmp_path, damage):
    chief = TaskId("chief", 0)
    starts(tmp_path, chief, 3, max_restarts=3)  # 2 incidents in a row
    (tmp_path / BUDGET_FILE).write_bytes(damage)
    lines = []
    budget = RestartBudget(JOB, 3, str(tmp_path), log=lines.append)
    assert budget.streak == 2 and len(budget.incidents) == 2
    [aside] = list(tmp_path.glob(BUDGET_FILE + ".unreadable-*"))
    assert aside.read_bytes() == damage
    assert len(lines) == 1 and lines[0] == MSG_KEPT_ASIDE.format(
        path=tmp_path / BUDGET_FILE, problem=lines[0].split("(", 1)[1].split("); its bytes")[0], aside=aside,
        good=f"{tmp_path / BUDGET_FILE}{LAST_GOOD}")
    starts(tmp_path, chief, 1, max_restarts=3)  # the loop ends no later than with an intact record
    with pytest.raises(PermanentFailure, match="failed 4 times in a row"):
        check_start(chief, CLUSTER, JOB, 3, str(tmp_path))


def test_both_copies_unreadable_fail_closed_with_how_to_reset(tmp_path):
    for name in (BUDGET_FILE, BUDGET_FILE + LAST_GOOD):
        (tmp_path / name).write_text("{torn")
    with pytest.raises(PermanentFailure, match=error_pattern(ERR_BOTH)) as refused:
        check_start(TaskId("worker", 0), CLUSTER, JOB, 3, str(tmp_path))
    assert "delete both files" in str(refused.value)


def test_a_record_deleted_but_its_copy_kept_is_read_from_the_copy(tmp_path):
    starts(tmp_path, TaskId("chief", 0), 3)
    (tmp_path / BUDGET_FILE).unlink()
    assert RestartBudget(JOB, 3, str(tmp_path)).streak == 2


def test_one_incident_counts_once_however_many_tasks_restart_for_it(tmp_path):
    for _ in range(2):  # two incidents: every task of the job re-created each time
        for task in (TaskId("chief", 0), TaskId("worker", 0), TaskId("evaluator", 0)):
            check_start(task, CLUSTER, JOB, 3, str(tmp_path))
    assert len(RestartBudget(JOB, 3, str(tmp_path)).incidents) == 1  # the first start is no incident


def test_every_task_started_past_the_budget_is_refused(tmp_path):
    starts(tmp_path, TaskId("chief", 0), 1, max_restarts=0)
    with pytest.raises(PermanentFailure):  # restart.max_restarts=0: the first restart is already past it
        check_start(TaskId("chief", 0), CLUSTER, JOB, 0, str(tmp_path))
    assert RestartBudget(JOB, 0, str(tmp_path)).exhausted
    with pytest.raises(PermanentFailure):
        check_start(TaskId("worker", 0), CLUSTER, JOB, 0, str(tmp_path))


def test_without_a_chief_worker_0_writes_the_record(tmp_path):
    starts(tmp_path, TaskId("worker", 1), 3, cluster=NO_CHIEF)
    assert not (tmp_path / BUDGET_FILE).exists()
    starts(tmp_path, TaskId("worker", 0), 2, cluster=NO_CHIEF)
    assert len(RestartBudget(JOB, 3, str(tmp_path)).incidents) == 1


def test_a_resubmitted_job_starts_with_a_fresh_budget(tmp_path):
    starts(tmp_path, TaskId("chief", 0), 4, max_restarts=2 + 1)
    again = Job("tfjob-team-a-mnist-2", JOB_ID_ENV)
    assert starts(tmp_path, TaskId("chief", 0), 1, job=again) == [None]
    assert RestartBudget(again, 3, str(tmp_path)).incidents == []


def test_tasks_no_manager_restarts_keep_no_record(tmp_path):
    assert starts(tmp_path, TaskId("chief", 0), 5, job=None) == [None] * 5
    assert not (tmp_path / BUDGET_FILE).exists()


def test_launch_counts_with_the_same_budget_in_memory():
    budget = RestartBudget(Job("launch-1", "launch"), 2)
    budget.note_start(None)
    assert budget.allows_another(None)
    budget.record_failure("worker:0 exited 200", None)
    budget.record_failure("a stall", None)
    assert not budget.allows_another(None) and not budget.exhausted
    assert budget.allows_another(10)  # a newer checkpoint than the start restored: the count begins again


def test_under_slurm_the_batch_script_counts_the_reruns_and_the_tasks_only_obey_the_budget(tmp_path):
    slurm = job_of({"SLURM_JOB_ID": "4711"}, None)
    assert starts(tmp_path, TaskId("chief", 0), 3, job=slurm) == [None] * 3  # the chief's starts are no incidents
    budget = RestartBudget(slurm, 1, str(tmp_path))
    for _ in range(2):  # what supervise/slurm_reruns.py records for two steps that exited 200
        budget.record_failure("step exited 200", None)
    with pytest.raises(PermanentFailure, match="job slurm-4711 failed 2 times in a row"):
        check_start(TaskId("worker", 0), CLUSTER, slurm, 1, str(tmp_path))
