"""A task with neither TF_CONFIG nor --task: the one-replica job, in one process. No TensorFlow.

It trains, evaluates and exports in this process (in-graph, no TensorFlow server): what a TFJob of a single
replica, which gets no TF_CONFIG, runs, and what a sweep's trial is.
"""

from __future__ import annotations

from estimator_mnist.config import TaskId
from estimator_mnist.config.cluster import parse_cluster
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.resolved_task import TaskSource

ERR_NO_TASK = ("{file}: the cluster has {count} tasks ({tasks}), so train needs to know which one this is: pass "
               "--task TYPE:INDEX, or set TF_CONFIG (Kubeflow's TFJob sets it in every pod of a job of more than one "
               "replica)")
SINGLE_STRATEGY = "one_device"
# The one process of a single-process job starts no TensorFlow server: its chief's address is never dialled.
NO_SERVER_ADDRESS = "localhost:2222"


def single_process(data: dict, file: str) -> TaskSource:
    """The one-replica job, if the YAML names at most one trainer (and at most an evaluator beside it)."""
    cluster = parse_cluster(file, data["cluster"]) if data.get("cluster") is not None else None
    tasks = cluster.tasks() if cluster is not None else []
    trainers = [t for t in tasks if t.is_trainer]
    if len(tasks) > 1 and not (len(trainers) == 1 and all(t.is_trainer or t.is_evaluator for t in tasks)):
        raise UsageError(ERR_NO_TASK.format(file=file, count=len(tasks), tasks=", ".join(str(t) for t in tasks)))
    address = str(cluster.address(trainers[0])) if trainers else NO_SERVER_ADDRESS
    strategy = data.get("strategy")
    name = strategy.get("name") if isinstance(strategy, dict) else strategy
    note = None
    if name not in ("mirrored", "one_device"):
        note = (f"no TF_CONFIG and no --task: a single-process job (strategy {SINGLE_STRATEGY} instead of "
                f"{name or 'the default'}) that trains, evaluates and exports here")
        strategy = SINGLE_STRATEGY
    return TaskSource(data={**data, "cluster": {"chief": [address]}, "strategy": strategy}, task=TaskId("chief", 0),
                      note=note)
