"""A moving average of the weights: the trainers keep it, the evaluator scores it, the export holds it.

Midway through a run the learning rate is still high and single steps move
the weights about; the average over the last few dozen steps scores better
than the weights of any one of them (docs/performance.md, "How the defaults
were chosen"). Training itself is unchanged: the optimizer updates the
weights as before, and after each step every trainer moves its copy of the
average towards them:

    average -= (1 - d) * (average - weights),  d = min(decay, (n - 1) / (n + w))

where n counts the steps, so the first step copies the weights and the
average's horizon grows to 1 / (1 - decay) steps over the first hundreds;
w is model.weight_average_warmup (8: tf.train.ExponentialMovingAverage's
num_updates warm-up). The averages
are saved beside the weights as "<weight>/ExponentialMovingAverage", TF's
own name for them, and restored in their place by whatever scores or
exports a checkpoint.
"""

from __future__ import annotations

from typing import List

import tensorflow as tf

from estimator_mnist.tf_model.averages import average_name, restore_map

def warmed_up_decay(decay: float, steps, warmup: int = 8) -> tf.Tensor:
    """The decay at step `steps`: min(decay, (n - 1) / (n + warmup)); 8 is tf.train.ExponentialMovingAverage's."""
    steps = tf.cast(steps, tf.float32)
    return tf.minimum(tf.constant(decay, tf.float32), tf.maximum(steps - 1.0, 0.0) / (steps + float(warmup)))


def update_averages(weights: List[tf.Variable], decay: float, global_step: tf.Tensor, after: tf.Operation,
                    warmup: int = 8) -> tf.Operation:
    """Creates an average per weight and returns the op that updates them after `after` (the optimizer's step);
    with decay 0 there is no average, and `after` is returned as it is.

    ONLY_FIRST_REPLICA: every replica holds the same weights after a
    synchronous step, so each keeps its average from its own copy, and no
    all-reduce is added (an update in replica context needs an aggregation,
    and MEAN would all-reduce the 6.5 MB of weights every step for nothing).
    Under the parameter-server strategies the average lives on the ps beside
    its weight, and every worker's step pulls it towards the weights that
    worker reads: with N workers it moves about N times per global step.
    """
    if not decay:
        return after
    with tf.control_dependencies([after]):
        kept = warmed_up_decay(decay, global_step, warmup)
        updates = []
        for weight in weights:
            # .name, not .op.name: a mirrored weight's .name is its first replica's, the one all replicas share.
            average = tf.compat.v1.get_variable(
                average_name(weight.name.split(":")[0]), shape=weight.shape, dtype=weight.dtype.base_dtype,
                initializer=tf.compat.v1.zeros_initializer(), trainable=False,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            # read_value() after `after`: the weights this step's update wrote.
            updates.append(average.assign_sub((1.0 - kept) * (average.read_value() - weight.read_value())))
        return tf.group(*updates, name="update_weight_averages")


def scaffold_restoring_averages(weights: List[tf.Variable]) -> tf.compat.v1.train.Scaffold:
    """For Estimator's evaluation: restores each weight from its average, and the global step.

    `weights` (float32 variables, as tf_workarounds.float32_variables gives
    them) must be the only network in their graph (model_fn's EVAL graph),
    so that they are named as in training.
    """
    saver = tf.compat.v1.train.Saver(restore_map([w.op.name for w in weights], weights, averaged=True,
                                                 global_step=tf.compat.v1.train.get_global_step()))
    return tf.compat.v1.train.Scaffold(saver=saver)
