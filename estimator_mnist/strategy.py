"""Distribution strategy and session settings for one task."""

from __future__ import annotations

import os

import tensorflow as tf

from .cluster import TaskId, task_host
from .config import Config

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _same_machine(a: str, b: str) -> bool:
    return a == b or (a in LOOPBACK_NAMES and b in LOOPBACK_NAMES)


def thread_settings(config: Config, task: TaskId):
    """(intra_op, inter_op) threads; 'auto' splits this machine's cores between its trainers.

    Left to TensorFlow, every process on a shared machine starts one thread per
    core, and two workers on two cores then run slower than one.
    """
    training = config.training
    if task.is_evaluator:
        # The evaluator runs between checkpoints and must not steal training's cores.
        auto_intra, auto_inter = 1, 1
    else:
        host = task_host(config.cluster, task)
        trainers = [h for r, _, h in config.cluster.task_hosts() if r in ("chief", "worker") and _same_machine(h, host)]
        auto_intra = max(1, available_cores() // max(1, len(trainers)))
        auto_inter = 2
    intra = auto_intra if training.intra_op_threads == "auto" else training.intra_op_threads
    inter = auto_inter if training.inter_op_threads == "auto" else training.inter_op_threads
    return intra, inter


def session_config(config: Config, task: TaskId) -> tf.compat.v1.ConfigProto:
    intra, inter = thread_settings(config, task)
    return tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra,
        inter_op_parallelism_threads=inter,
    )


def build_train_strategy(config: Config, task: TaskId):
    """The strategy for training roles; None for the evaluator.

    The evaluator must not build MultiWorkerMirroredStrategy: it is not a
    member of the collective group (TF 2.15 fails with KeyError: 'evaluator'),
    and it evaluates on one machine anyway.
    """
    if task.is_evaluator:
        return None
    if config.strategy == "multi_worker_mirrored":
        # The v1 class: Estimator builds graphs, and the v2 class sets up
        # eager collectives that an Estimator session never uses.
        return tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy(
            communication=tf.distribute.experimental.CollectiveCommunication.AUTO)
    raise ValueError(f"unsupported strategy {config.strategy!r}")
