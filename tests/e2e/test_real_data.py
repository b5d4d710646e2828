"""The real MNIST as the tasks read it: prepared, verified, scaled and shaped."""

import numpy as np
import tensorflow as tf

from estimator_mnist import data_prep
from estimator_mnist.data import input_fn

TRAIN = tf.estimator.ModeKeys.TRAIN
EVAL = tf.estimator.ModeKeys.EVAL


def test_real_mnist_is_scaled_and_shaped(mnist_data_dir):
    context = tf.distribute.InputContext(2, 1, 2)
    features, labels = next(iter(input_fn(TRAIN, context, data_dir=mnist_data_dir, batch_size_per_replica=32)))
    images = features["image"].numpy()
    assert images.shape == (32, 28, 28, 1) and images.dtype == np.float32
    assert 0.0 <= images.min() and images.max() <= 1.0 and images.max() > 0.5
    assert labels.dtype == tf.int32 and set(labels.numpy()) <= set(range(10))
    total = sum(int(l.shape[0]) for _, l in input_fn(EVAL, None, data_dir=mnist_data_dir, batch_size_per_replica=32))
    assert total == 10000


def test_prepared_data_is_verified(mnist_data_dir):
    builder = data_prep._builder(mnist_data_dir)
    data_prep.verify_prepared(builder)
    assert "already prepared" in data_prep.prepare_data(mnist_data_dir)
