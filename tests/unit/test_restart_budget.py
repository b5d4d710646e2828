"""The restart budget (restart_budget.py): one owner of restart bookkeeping for launch and cluster managers."""

import json

import pytest

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.errors import PermanentFailure
from estimator_mnist.supervise.restart_budget import (ERR_BUDGET, JOB_ID_ENV, RECORD_FILE, Job, RestartBudget,
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


def test_the_writer_s_restarts_are_incidents_until_the_budget_is_used_up(tmp_path):
    incidents = starts(tmp_path, TaskId("chief", 0), 4)  # the first start and restart.max_restarts=3 restarts
    assert incidents[0] is None and [i["number"] for i in incidents[1:]] == [1, 2, 3]
    with pytest.raises(PermanentFailure, match=error_pattern(ERR_BUDGET)) as refused:
        check_start(TaskId("chief", 0), CLUSTER, JOB, 3, str(tmp_path), resumes_from=250)
    message = str(refused.value)
    assert "job tfjob-team-a-mnist has been restarted 4 times (restart.max_restarts=3)" in message
    assert "#4 at" in message and "(resumes from step 250)" in message and "\n" not in message
    record = json.loads((tmp_path / RECORD_FILE).read_text())
    assert record["job"] == JOB.key and record["starts"] == 5 and len(record["incidents"]) == 4


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
    assert not (tmp_path / RECORD_FILE).exists()
    starts(tmp_path, TaskId("worker", 0), 2, cluster=NO_CHIEF)
    assert len(RestartBudget(JOB, 3, str(tmp_path)).incidents) == 1


def test_a_resubmitted_job_starts_with_a_fresh_budget(tmp_path):
    starts(tmp_path, TaskId("chief", 0), 4, max_restarts=2 + 1)
    again = Job("tfjob-team-a-mnist-2", JOB_ID_ENV)
    assert starts(tmp_path, TaskId("chief", 0), 1, job=again) == [None]
    assert RestartBudget(again, 3, str(tmp_path)).incidents == []


def test_tasks_no_manager_restarts_keep_no_record(tmp_path):
    assert starts(tmp_path, TaskId("chief", 0), 5, job=None) == [None] * 5
    assert not (tmp_path / RECORD_FILE).exists()


def test_launch_counts_with_the_same_budget_in_memory():
    budget = RestartBudget(Job("launch-1", "launch"), 2)
    assert budget.allows_another()
    budget.record_incident("worker:0 exited 200")
    budget.record_incident("a stall")
    assert not budget.allows_another() and not budget.exhausted


def test_under_slurm_the_batch_script_counts_the_reruns_and_the_tasks_only_obey_the_budget(tmp_path):
    slurm = job_of({"SLURM_JOB_ID": "4711"}, None)
    assert starts(tmp_path, TaskId("chief", 0), 3, job=slurm) == [None] * 3  # the chief's starts are no incidents
    budget = RestartBudget(slurm, 1, str(tmp_path))
    for _ in range(2):  # what supervise/slurm_reruns.py records for two steps that exited 200
        budget.record_incident("step exited 200")
    with pytest.raises(PermanentFailure, match="job slurm-4711 has been restarted 2 times"):
        check_start(TaskId("worker", 0), CLUSTER, slurm, 1, str(tmp_path))
