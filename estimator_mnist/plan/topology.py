"""Tasks and TF_CONFIG: naming a task, and building or parsing the TF_CONFIG of one task.

Pure functions only: `build_tf_config` returns a dict and never touches
os.environ; the task plan carries it to the process. A TF_CONFIG from the
environment is read by plan/tf_config_source.py. No TensorFlow.
"""

from __future__ import annotations

import copy
import re
from typing import Dict, List, Mapping

from estimator_mnist.config import TRAINING_ROLES, ClusterConfig, TaskId
from estimator_mnist.errors import UsageError

ERR_TASK_FORMAT = "--task {got!r} is not TYPE:INDEX; use one of: {tasks}"
ERR_NO_SUCH_TASK = "{file}: there is no task {task} in this cluster; use one of: {tasks}"
ERR_TF_CONFIG_JSON = "TF_CONFIG is not valid JSON ({reason}); export it as printed by 'estimator-mnist tf-config', or pass --cluster FILE --task TYPE:INDEX"
ERR_TF_CONFIG_SHAPE = "TF_CONFIG {problem}; it needs {{\"cluster\": {{...}}, \"task\": {{\"type\": ..., \"index\": ...}}}} as printed by 'estimator-mnist tf-config'"

_TASK = re.compile(r"^(?P<type>[a-z]+):(?P<index>\d+)$")


def parse_task(text: str, cluster: ClusterConfig, file: str) -> TaskId:
    valid = ", ".join(str(t) for t in cluster.tasks())
    match = _TASK.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise UsageError(ERR_TASK_FORMAT.format(got=text, tasks=valid))
    task = TaskId(match["type"], int(match["index"]))
    if task not in cluster.tasks():
        raise UsageError(ERR_NO_SUCH_TASK.format(file=file, task=task, tasks=valid))
    return task


def _training_cluster(cluster: ClusterConfig) -> Dict[str, List[str]]:
    return {role: [str(a) for a in cluster.addresses(role)] for role in TRAINING_ROLES if cluster.addresses(role)}


def estimator_tf_config(tf_config: Mapping) -> dict:
    """Rewrites any TF_CONFIG (ours or Kubeflow's) into the layout that works for every role.

    - The evaluator is never part of the training cluster: MultiWorkerMirrored
      workers must not wait for it, and it must not place ops on them.
    - Estimator's RunConfig insists on a `chief` in the cluster even for the
      evaluator, which never contacts it. For a worker-only cluster the
      evaluator therefore sees worker 0 as the chief (worker 0 is the chief of
      a worker-only MultiWorkerMirrored cluster anyway).
    """
    result = copy.deepcopy(dict(tf_config))
    cluster = {k: list(v) for k, v in dict(result.get("cluster") or {}).items() if k != "evaluator"}
    task = dict(result.get("task") or {})
    if task.get("type") == "evaluator" and cluster and "chief" not in cluster and cluster.get("worker"):
        workers = cluster.pop("worker")
        cluster["chief"] = workers[:1]
        if workers[1:]:
            cluster["worker"] = workers[1:]
    result["cluster"] = cluster
    result["task"] = task
    return result


def build_tf_config(cluster: ClusterConfig, task: TaskId) -> dict:
    """The TF_CONFIG dict for one task of the YAML cluster."""
    return estimator_tf_config({"cluster": _training_cluster(cluster), "task": {"type": task.type, "index": task.index}})
