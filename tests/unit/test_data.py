"""input_fn: sharding, shuffling, batching, the whole eval split, and the error for unprepared data."""

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.data import input_fn
from estimator_mnist.errors import UsageError

TRAIN = tf.estimator.ModeKeys.TRAIN
EVAL = tf.estimator.ModeKeys.EVAL


def indexed_dataset(count):
    """Examples whose label is their index, so every example can be traced."""
    images = np.zeros((count, 28, 28, 1), np.uint8)
    return lambda split: tf.data.Dataset.from_tensor_slices((images, np.arange(count, dtype=np.int64)))


def first_epoch_labels(pipelines, pipeline_id, count=100, batch=5):
    context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline_id,
                                         num_replicas_in_sync=pipelines)
    dataset = input_fn(TRAIN, context, data_dir=None, batch_size_per_replica=batch, shuffle_buffer=1000,
                       make_dataset=indexed_dataset(count))
    labels = []
    for features, batch_labels in dataset.take(count // pipelines // batch):
        assert features["image"].shape == (batch, 28, 28, 1)
        labels.extend(batch_labels.numpy().tolist())
    return labels


def test_two_pipelines_see_disjoint_shards_that_cover_the_split():
    first = first_epoch_labels(2, 0)
    second = first_epoch_labels(2, 1)
    assert len(first) == len(set(first)) == 50
    assert len(second) == len(set(second)) == 50
    assert not set(first) & set(second)
    assert set(first) | set(second) == set(range(100))


def test_training_pipeline_repeats_and_shuffles_per_pipeline():
    first = first_epoch_labels(2, 0)
    assert first != sorted(first)  # shuffled
    context = tf.distribute.InputContext(2, 0, 2)
    dataset = input_fn(TRAIN, context, data_dir=None, batch_size_per_replica=5, make_dataset=indexed_dataset(100))
    assert sum(1 for _ in dataset.take(30)) == 30  # 150 examples from a 50-example shard: it repeats


def test_eval_pipeline_is_whole_and_unsharded():
    dataset = input_fn(EVAL, None, data_dir=None, batch_size_per_replica=5, eval_batch_size=30,
                       make_dataset=indexed_dataset(100))
    labels = np.concatenate([labels.numpy() for _, labels in dataset])
    assert labels.tolist() == list(range(100))


def test_unprepared_data_dir_names_the_fix(tmp_path):
    with pytest.raises(UsageError, match=rf"MNIST is not prepared in {tmp_path} .*run 'estimator-mnist prepare-data --data-dir {tmp_path}'"):
        input_fn(EVAL, None, data_dir=str(tmp_path), batch_size_per_replica=8)


def test_prepared_splits_load_through_tfds(tmp_path):
    """load_split on TFDS's own mock of a prepared MNIST: no files, no network."""
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=12):
        batches = list(input_fn(EVAL, None, data_dir=str(tmp_path), batch_size_per_replica=4, eval_batch_size=5))
    assert [int(labels.shape[0]) for _, labels in batches] == [5, 5, 2]
    assert batches[0][0]["image"].shape[1:] == (28, 28, 1) and batches[0][0]["image"].dtype == tf.float32
