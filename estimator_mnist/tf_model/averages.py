"""Reading a network's moving averages back from a checkpoint: their names, and a Saver map that restores them.

The trainers keep the averages (tf_task/weight_average.py); the evaluator,
the export and ensembles restore each weight from its average in its place.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import tensorflow as tf

SUFFIX = "ExponentialMovingAverage"


def average_name(weight_name: str) -> str:
    return f"{weight_name}/{SUFFIX}"


def restore_map(weight_names: List[str], weights: List[tf.Variable], averaged: bool,
                global_step: Optional[tf.Variable] = None) -> Dict[str, tf.Variable]:
    """The var_list of a Saver that restores a trained network into `weights`: its averages if `averaged`.

    `weight_names` are the names the weights had in training (the graph that
    restores may have scoped or numbered them differently).
    """
    mapping = {(average_name(name) if averaged else name): weight for name, weight in zip(weight_names, weights)}
    if global_step is not None:
        mapping[tf.compat.v1.GraphKeys.GLOBAL_STEP] = global_step
    return mapping


def has_averages(checkpoint_path: str, weight_names: List[str]) -> bool:
    """Whether a checkpoint holds an average of every weight (its run had model.weight_average_decay > 0)."""
    stored = {name for name, _ in tf.train.list_variables(checkpoint_path)}
    return all(average_name(name) in stored for name in weight_names)
