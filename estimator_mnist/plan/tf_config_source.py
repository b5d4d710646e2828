"""A task from the TF_CONFIG environment variable, as Kubeflow's training-operator writes it. No TensorFlow.

Kubeflow's training-operator (v1.9, `genClusterSpec`) writes TF_CONFIG with
EVERY replica type in the cluster map, the evaluator included, lower-cased
(a legacy `Master` replica as "master"), hosts
`<job>-<type>-<index>.<namespace>.svc:<port>`, and `"environment": "cloud"`:

    {"cluster": {"chief": ["mnist-chief-0.default.svc:2222"], "evaluator": ["mnist-evaluator-0.default.svc:2222"],
                 "worker": ["mnist-worker-0.default.svc:2222"]},
     "task": {"type": "worker", "index": 0}, "environment": "cloud"}

The product keeps the whole topology in its own config (the evaluator's
presence decides who evaluates and how long checkpoints are kept) and hands
TensorFlow only what it can take (topology.estimator_tf_config: no evaluator
in a training cluster). A TFJob of one replica gets no TF_CONFIG at all:
that is the single-process job (single_process_source.py).
"""

from __future__ import annotations

import json

from estimator_mnist.config import ROLES, TaskId
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.resolved_task import TaskSource
from estimator_mnist.plan.topology import ERR_TF_CONFIG_JSON, ERR_TF_CONFIG_SHAPE, estimator_tf_config

OPERATOR_ENVIRONMENT = "cloud"  # the "environment" the operator writes
# An evaluator whose TF_CONFIG lists no evaluator host (only its own task): it runs no server, and no trainer
# can be beside it on a host of that name, so it never waits for trainers on its machine.
UNLISTED_EVALUATOR_HOST = "localhost"


def read_tf_config(text: str) -> dict:
    """The TF_CONFIG as written, validated, with `master` read as the chief. UsageError (one line) if unusable."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(ERR_TF_CONFIG_JSON.format(reason=exc)) from None
    if not isinstance(value, dict):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem="is not a JSON object"))
    clusters, task = value.get("cluster"), value.get("task")
    if not isinstance(clusters, dict):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem="has no \"cluster\" object"))
    clusters = {str(k).lower(): v for k, v in clusters.items()}
    if "master" in clusters:
        if "chief" in clusters:
            raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem="lists both a master and a chief; keep one"))
        clusters["chief"] = clusters.pop("master")
    unknown = sorted(set(clusters) - set(ROLES))
    if unknown:
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem=f"has cluster role(s) {', '.join(unknown)}; the roles "
                                                            f"are {', '.join(ROLES)} (and master, read as chief)"))
    for role, hosts in clusters.items():
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
            raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem=f"has cluster.{role} {hosts!r}, not a list of "
                                                                "\"host:port\" strings"))
    if not isinstance(task, dict) or str(task.get("type", "")).lower() not in ROLES + ("master",):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem=f"has no valid task.type (one of {', '.join(ROLES)})"))
    role = str(task["type"]).lower()
    role = "chief" if role == "master" else role
    index = task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem=f"has task.index {index!r}, not a whole number >= 0"))
    if not (clusters.get("chief") or clusters.get("worker")):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem="has no cluster with a chief or workers"))
    if index >= len(clusters.get(role) or ([None] if role == "evaluator" else [])):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem=f"names task {role}:{index}, which its cluster does "
                                                            "not list"))
    return {"cluster": clusters, "task": {"type": role, "index": index}, "environment": value.get("environment")}


def yaml_cluster(tf_config: dict) -> dict:
    """The product's own view of the TF_CONFIG cluster, the evaluator included (as a host: it runs no server)."""
    clusters = tf_config["cluster"]
    cluster = {role: list(clusters[role]) for role in ("chief", "worker", "ps") if clusters.get(role)}
    if clusters.get("evaluator") or tf_config["task"]["type"] == "evaluator":
        evaluator = (clusters.get("evaluator") or [UNLISTED_EVALUATOR_HOST])[0]
        cluster["evaluator"] = evaluator.rsplit(":", 1)[0] if ":" in evaluator else evaluator
    return cluster


def from_tf_config(data: dict, text: str) -> TaskSource:
    """The task of a TF_CONFIG: the YAML data with its cluster, and the TF_CONFIG TensorFlow gets from it."""
    tf_config = read_tf_config(text)
    note = None
    if data.get("cluster") is not None:
        note = "TF_CONFIG defines the cluster: the cluster section of the YAML is ignored"
    data = {**data, "cluster": yaml_cluster(tf_config)}
    task = TaskId(tf_config["task"]["type"], tf_config["task"]["index"])
    operator = tf_config.get("environment") == OPERATOR_ENVIRONMENT
    return TaskSource(data=data, task=task, tf_config=estimator_tf_config(tf_config), gpus_from_manager=operator,
                      note=note)
