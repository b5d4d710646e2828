"""The real MNIST as the tasks read it: prepared, verified, decoded in TFDS's order, scaled and shaped."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.mnist_data import prepare as data_prep
from estimator_mnist.tf_task.data import input_fn, load_split
from estimator_mnist.errors import UsageError

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


def test_the_decoded_copy_holds_tfds_s_examples_in_tfds_s_order(mnist_data_dir):
    import tensorflow_datasets as tfds

    for split, size in data_prep.SPLIT_SIZES.items():
        tfds_split = tfds.load("mnist", split=split, data_dir=mnist_data_dir, download=False, as_supervised=True,
                               shuffle_files=False)
        expected_images, expected_labels = next(iter(tfds.as_numpy(tfds_split.batch(size))))
        images, labels = next(iter(load_split(split, mnist_data_dir).batch(size + 1)))
        np.testing.assert_array_equal(images.numpy(), expected_images)
        np.testing.assert_array_equal(labels.numpy(), expected_labels)


def test_a_data_dir_prepared_before_the_decoded_copy_is_refused_then_decoded(mnist_data_dir, tmp_path):
    import shutil

    shutil.copytree(Path(mnist_data_dir, "mnist"), tmp_path / "mnist")  # TFDS's dataset alone
    assert not data_prep.is_prepared(tmp_path)
    with pytest.raises(UsageError, match=r"no decoded copy in .*run 'estimator-mnist prepare-data --data-dir "):
        load_split("test", str(tmp_path))
    assert "already prepared" in data_prep.prepare_data(tmp_path) and data_prep.is_prepared(tmp_path)
    assert int(next(iter(load_split("test", str(tmp_path)).batch(20000)))[1].shape[0]) == 10000
