"""The Estimator `model_fn` for every mode, over the CNN of tf_model/network.py.

Hyperparameters arrive in `params["config"]` (the frozen ModelConfig) and
`params["batch_size_per_replica"]`, `params["max_steps"]`,
`params["sync_replicas"]` and `params["precision"]` (resolved from
model.precision by the task); nothing is read from module globals.
"""

from __future__ import annotations

import math

import tensorflow as tf
from tensorflow.python.autograph.impl.api import autograph_artifact

from estimator_mnist.tf_task.data import IMAGE_KEY
from estimator_mnist.tf_task.gradient_compression import compress_gradients
from estimator_mnist.tf_task.preemption import add_preemption_counter
from estimator_mnist.tf_task.tf_workarounds import ReleaseSyncTokensHook, float32_variables
from estimator_mnist.tf_task.weight_average import scaffold_restoring_averages, update_averages

from estimator_mnist.tf_model.network import NUM_CLASSES, build_network


def _learning_rate(model_config, global_step, max_steps):
    peak = model_config.learning_rate
    if model_config.lr_schedule == "constant":
        return peak
    if model_config.lr_schedule == "cosine":
        # Decaying to a tenth makes the last checkpoints agree with each other, so
        # the final accuracy does not depend on where the noise of the last steps lands.
        return tf.compat.v1.train.cosine_decay(peak, global_step, max_steps, alpha=0.1)
    # warmup_cosine: measured to reach 99.2% in fewer epochs than a decay to a tenth
    # (docs/performance.md, "How the defaults were chosen"). The warm-up keeps
    # Adam's first steps, whose second-moment estimates are still poor, small.
    # Plain ops rather than tf.compat.v1.train.cosine_decay, which hands back a function when run eagerly:
    # benchmarks/schedule_probe.py evaluates this same schedule under Keras.
    warmup = min(model_config.warmup_steps, max_steps - 1)
    step = tf.cast(global_step, tf.float32)
    warming = peak * (0.1 + 0.9 * step / max(1, warmup))
    progress = tf.minimum(tf.maximum(step - warmup, 0.0) / (max_steps - warmup), 1.0)
    decaying = peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
    return tf.where(step < warmup, warming, decaying)


def _optimizer(model_config, learning_rate):
    # tf.compat.v1 optimizers: Estimator's distributed training drives them.
    if model_config.optimizer == "adam":
        return tf.compat.v1.train.AdamOptimizer(learning_rate, model_config.adam_beta1, model_config.adam_beta2)
    return tf.compat.v1.train.MomentumOptimizer(learning_rate, model_config.momentum)


def global_batch_loss(labels, logits, global_batch_size, label_smoothing=0.0):
    """Cross-entropy summed over this replica's examples, divided by the GLOBAL batch.

    The replicas' gradients are summed by the all-reduce, so the result is the
    gradient of the mean over the global batch whatever the number of replicas.
    Reduction.SUM also tells the v1 optimizer not to divide by the number of
    replicas a second time (it does so for any other last loss reduction).
    With `label_smoothing` s the target is (1 - s) one-hot + s / 10 on every
    class, as Keras's `label_smoothing`: measured to reach 99.2% in fewer steps
    (docs/performance.md, "Label smoothing").
    """
    if label_smoothing:
        targets = tf.one_hot(labels, NUM_CLASSES) * (1.0 - label_smoothing) + label_smoothing / NUM_CLASSES
        per_example = tf.nn.softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    else:
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.compat.v1.losses.compute_weighted_loss(
        per_example, weights=1.0 / global_batch_size,
        reduction=tf.compat.v1.losses.Reduction.SUM, loss_collection=None)


# TF 2.15: under a distribution strategy (mirrored_run.call_for_each_replica) AutoGraph parsed and
# rewrote model_fn and everything it calls, about 0.5 s of each trainer's start-up, although it is
# graph-building Python with no tensor-dependent control flow. Marked as AutoGraph's own artifact it is
# called as it is (tf.autograph.experimental.do_not_convert would hide its arguments from Estimator,
# which then refuses it). Pinned by tests/unit/test_model.py::test_autograph_leaves_model_fn_alone.
@autograph_artifact
def model_fn(features, labels, mode, params, config=None):
    model_config = params["config"]
    images = features[IMAGE_KEY] if isinstance(features, dict) else features
    # The variables are float32 whatever the precision. Evaluation computes in float32, as the export
    # (export.py) does, unless evaluation.precision: training (docs/performance.md, "Evaluating in bfloat16").
    precision = params.get({tf.estimator.ModeKeys.TRAIN: "precision",
                            tf.estimator.ModeKeys.EVAL: "eval_precision"}.get(mode, ""), "float32")
    network = build_network(model_config.network, precision, model_config.dropout, model_config.normalise_inputs)
    logits = network(images, training=mode == tf.estimator.ModeKeys.TRAIN)
    class_ids = tf.argmax(logits, axis=1, output_type=tf.int32)

    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"class_ids": class_ids, "probabilities": tf.nn.softmax(logits), "logits": logits}
        # The SavedModel is written by export.py, with its own signatures, not from this spec.
        return tf.estimator.EstimatorSpec(mode=mode, predictions=predictions)

    labels = tf.cast(labels, tf.int32)
    if mode == tf.estimator.ModeKeys.EVAL:
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits, loss_collection=None)
        metrics = {"accuracy": tf.compat.v1.metrics.accuracy(labels=labels, predictions=class_ids)}
        # The average the trainers kept (weight_average.py), if they kept one, is scored in the weights' place.
        weights = float32_variables(network)  # the ones training averaged, under any AutoCastVariable
        scaffold = scaffold_restoring_averages(weights) if model_config.weight_average_decay else None
        return tf.estimator.EstimatorSpec(mode=mode, loss=loss, eval_metric_ops=metrics, scaffold=scaffold)

    # In replica context this is the strategy Estimator trains with (or the default one).
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    loss = global_batch_loss(labels, logits, params["batch_size_per_replica"] * replicas, model_config.label_smoothing)
    batch_accuracy = tf.reduce_mean(tf.cast(tf.equal(class_ids, labels), tf.float32))
    # Estimator already writes the (replica-summed) "loss" summary.
    tf.compat.v1.summary.scalar("train_accuracy", batch_accuracy)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    learning_rate = _learning_rate(model_config, global_step, params["max_steps"])
    tf.compat.v1.summary.scalar("learning_rate", learning_rate)
    optimizer = compress_gradients(_optimizer(model_config, learning_rate), params.get("gradient_compression", "none"))
    if precision == "mixed_float16":
        # float16's narrow range flushes small gradients to zero; scaling the
        # loss (dynamically, skipping steps that overflow) keeps them.
        # bfloat16 has float32's range and needs no scaling.
        optimizer = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(optimizer, "dynamic")
    hooks = []
    sync = params.get("sync_replicas")
    if sync:
        replicas_to_aggregate, total_replicas = sync
        # Each step applies the mean of the first `replicas_to_aggregate`
        # gradients computed from the current weights; gradients that arrive
        # later are stale and dropped, so the slowest workers are backups
        # instead of holding every step back. Without a strategy the loss is
        # this replica's own mean, which is what the aggregation averages.
        optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
            optimizer, replicas_to_aggregate=replicas_to_aggregate, total_num_replicas=total_replicas)
        hooks.append(optimizer.make_session_run_hook(is_chief=config is None or config.is_chief))
    weights = float32_variables(network)
    train_op = optimizer.minimize(loss, global_step=global_step, var_list=weights)
    train_op = update_averages(weights, model_config.weight_average_decay, global_step, after=train_op,
                               warmup=model_config.weight_average_warmup)
    add_preemption_counter()  # a SIGTERM to any trainer stops them all at the same step (preemption.py)
    if sync:
        hooks.append(ReleaseSyncTokensHook(optimizer, total_replicas))
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op, training_hooks=hooks)
