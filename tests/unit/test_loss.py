"""The training loss: cross-entropy over the global batch, with label smoothing; evaluation's loss stays one-hot."""

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.config.schema import ModelConfig
from estimator_mnist.tf_task.model import global_batch_loss, model_fn


def test_global_batch_loss_divides_by_the_global_batch():
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        logits = tf.zeros([4, 10])
        labels = tf.zeros([4], tf.int32)
        loss = global_batch_loss(labels, logits, global_batch_size=8)
        # Four examples of log(10) each, summed, over a global batch of 8.
        assert session.run(loss) == pytest.approx(4 * np.log(10) / 8, rel=1e-5)


def test_label_smoothing_spreads_that_much_of_the_target_over_every_class():
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        # One example, all its logit on class 0, labelled class 0.
        logits = tf.constant([[np.log(91.0)] + [0.0] * 9])  # softmax: 0.91 on class 0, 0.01 on each other
        labels = tf.constant([0])
        plain = session.run(global_batch_loss(labels, logits, 1, label_smoothing=0.0))
        smoothed = session.run(global_batch_loss(labels, logits, 1, label_smoothing=0.1))
    assert plain == pytest.approx(-np.log(0.91), rel=1e-5)
    # Target 0.91 on class 0 and 0.01 on the others, Keras's (1 - s) one-hot + s / 10.
    assert smoothed == pytest.approx(-(0.91 * np.log(0.91) + 9 * 0.01 * np.log(0.01)), rel=1e-5)
    assert ModelConfig().label_smoothing == pytest.approx(0.1)  # the default (docs/performance.md)


def test_evaluation_loss_is_against_one_hot_labels_whatever_the_smoothing():
    def eval_loss(smoothing):
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            tf.keras.utils.set_random_seed(3)  # the same initial weights in both graphs
            features = {"image": tf.random.uniform([8, 28, 28, 1], seed=1)}
            labels = tf.constant(np.arange(8) % 10, tf.int64)
            tf.compat.v1.train.get_or_create_global_step()
            params = {"config": ModelConfig(label_smoothing=smoothing, weight_average_decay=0.0),
                      "batch_size_per_replica": 8, "max_steps": 100}
            spec = model_fn(features, labels, tf.estimator.ModeKeys.EVAL, params)
            session.run(tf.compat.v1.global_variables_initializer())
            return session.run(spec.loss)

    assert eval_loss(0.3) == pytest.approx(eval_loss(0.0), rel=1e-6)
