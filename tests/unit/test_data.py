"""input_fn: sharding, shuffling, batching, the whole eval split, and the error for unprepared data."""

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.mnist_data import decoded as decoded_mnist
from estimator_mnist.mnist_data.arrays import load_split_numpy
from estimator_mnist.tf_task.data import input_fn
from estimator_mnist.errors import UsageError
from tests.helpers import record_autograph_conversions

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


def write_copy(data_dir, count=12):
    """A decoded copy whose image i is filled with i and whose label i is i % 10."""
    images = np.repeat(np.arange(count, dtype=np.uint8), 28 * 28).reshape(count, 28, 28, 1)
    labels = np.arange(count) % 10
    return decoded_mnist.write(data_dir, {"train": (images, labels), "test": (images, labels)}, source="test")


def test_prepared_splits_load_from_the_decoded_copy_in_order(tmp_path):
    write_copy(tmp_path)
    batches = list(input_fn(EVAL, None, data_dir=str(tmp_path), batch_size_per_replica=4, eval_batch_size=5))
    assert [int(labels.shape[0]) for _, labels in batches] == [5, 5, 2]
    assert batches[0][0]["image"].shape[1:] == (28, 28, 1) and batches[0][0]["image"].dtype == tf.float32
    labels = np.concatenate([labels.numpy() for _, labels in batches])
    assert labels.tolist() == [i % 10 for i in range(12)]
    pixels = np.concatenate([features["image"].numpy()[:, 0, 0, 0] for features, _ in batches])
    np.testing.assert_allclose(pixels, np.arange(12) / 255.0, rtol=1e-6)
    images, labels = load_split_numpy("test", str(tmp_path))
    assert images.shape == (12, 28, 28, 1) and images.dtype == np.uint8 and labels.dtype == np.int64


def test_a_truncated_copy_names_the_file_and_the_fix(tmp_path):
    copy = write_copy(tmp_path)
    with open(copy / "train.images", "r+b") as handle:
        handle.truncate(100)
    with pytest.raises(UsageError, match=rf"MNIST is not prepared in {tmp_path} \({copy}/train.images has 100 bytes, "
                                         rf"expected 9408\); run 'estimator-mnist prepare-data --data-dir {tmp_path}'"):
        input_fn(TRAIN, None, data_dir=str(tmp_path), batch_size_per_replica=4)
    input_fn(EVAL, None, data_dir=str(tmp_path), batch_size_per_replica=4)  # the test split is intact


def test_a_newer_copy_replaces_the_old_one_whole(tmp_path):
    write_copy(tmp_path, count=12)
    write_copy(tmp_path, count=3)
    assert [name.name for name in tmp_path.iterdir()] == [decoded_mnist.DIRECTORY]  # no staging left behind
    assert decoded_mnist.counts(tmp_path) == {"train": 3, "test": 3} and decoded_mnist.problem(tmp_path) is None


@pytest.mark.parametrize("manifest", ["", "[]", '{"format": 1}', '{"format": 1, "splits": [3]}', '{"format": 0, "splits": {}}'])
def test_an_unreadable_manifest_is_no_copy(tmp_path, manifest):
    copy = write_copy(tmp_path)
    (copy / "manifest.json").write_text(manifest)
    assert decoded_mnist.problem(tmp_path) == f"no decoded copy in {copy}"


def test_autograph_leaves_the_map_functions_alone(tmp_path, monkeypatch):
    converted = record_autograph_conversions(monkeypatch)
    write_copy(tmp_path)
    with tf.Graph().as_default():
        input_fn(TRAIN, None, data_dir=str(tmp_path), batch_size_per_replica=4)
        input_fn(EVAL, None, data_dir=str(tmp_path), batch_size_per_replica=4)

        def mapped(x):  # control: AutoGraph does convert what is not marked
            return x + 1

        tf.data.Dataset.range(3).map(mapped)
    assert "mapped" in converted
    assert not {"read_whole_split", "_to_features"} & set(converted), converted


def training_rows(data_dir, pipelines, held_out, count=100, batch=5):
    """Every row of the decoded copy (image i is filled with i) that `pipelines` training pipelines (one per
    worker, as the strategies shard) see in one epoch."""
    seen = []
    for pipeline_id in range(pipelines):
        context = tf.distribute.InputContext(pipelines, pipeline_id, pipelines) if pipelines > 1 else None
        dataset = input_fn(TRAIN, context, data_dir=str(data_dir), batch_size_per_replica=batch, shuffle_buffer=1000,
                           validation_examples=held_out)
        epoch = (count - held_out) // pipelines // batch
        seen.append([round(pixel * 255) for features, _ in dataset.take(epoch)
                     for pixel in features["image"].numpy()[:, 0, 0, 0]])
    return seen


def validation_rows(data_dir, held_out, context=None):
    dataset = input_fn(EVAL, context, data_dir=str(data_dir), batch_size_per_replica=5, eval_batch_size=7,
                       validation_examples=held_out, eval_split="validation")
    return [round(pixel * 255) for features, _ in dataset for pixel in features["image"].numpy()[:, 0, 0, 0]]


@pytest.mark.parametrize("pipelines", [1, 2, 4], ids=["one_device", "two_workers", "four_workers"])
def test_the_validation_split_is_the_last_rows_and_no_training_shard_holds_one(tmp_path, pipelines):
    write_copy(tmp_path, count=100)
    shards = training_rows(tmp_path, pipelines, held_out=20)
    assert sorted(row for shard in shards for row in shard) == list(range(80))  # each training row once
    assert all(len(shard) == len(set(shard)) for shard in shards)
    assert validation_rows(tmp_path, 20) == list(range(80, 100))


def test_every_task_scores_the_same_validation_rows_whatever_its_input_context(tmp_path):
    # The evaluator of a cluster, the one-process job and any worker all read the whole split, unsharded.
    write_copy(tmp_path, count=100)
    contexts = [None, tf.distribute.InputContext(2, 0, 2), tf.distribute.InputContext(4, 3, 4)]
    assert [validation_rows(tmp_path, 20, context) for context in contexts] == [list(range(80, 100))] * 3


def test_without_a_validation_split_training_reads_every_row(tmp_path):
    write_copy(tmp_path, count=100)
    assert sorted(row for shard in training_rows(tmp_path, 2, held_out=0) for row in shard) == list(range(100))
    images, labels = load_split_numpy("train", str(tmp_path))
    assert labels.tolist() == [i % 10 for i in range(100)] and images[:, 0, 0, 0].tolist() == list(range(100))


def test_the_decoded_copy_is_cut_into_training_and_validation_rows(tmp_path):
    write_copy(tmp_path)
    train_images, _ = load_split_numpy("train", str(tmp_path), validation_examples=4)
    held_images, held_labels = load_split_numpy("validation", str(tmp_path), validation_examples=4)
    assert train_images[:, 0, 0, 0].tolist() == list(range(8)) and held_images[:, 0, 0, 0].tolist() == [8, 9, 10, 11]
    assert held_labels.tolist() == [8, 9, 0, 1]
    trained = input_fn(TRAIN, None, data_dir=str(tmp_path), batch_size_per_replica=8, validation_examples=4)
    _, labels = next(iter(trained))
    assert sorted(labels.numpy().tolist()) == sorted(i % 10 for i in range(8))  # one epoch: rows 0-7 only
    scored = input_fn(EVAL, None, data_dir=str(tmp_path), batch_size_per_replica=8, validation_examples=4,
                      eval_split="validation")
    assert np.concatenate([labels.numpy() for _, labels in scored]).tolist() == [8, 9, 0, 1]
    test_images, _ = load_split_numpy("test", str(tmp_path), validation_examples=4)  # the test split stays whole
    assert len(test_images) == 12


def test_holding_out_every_training_image_names_the_key_and_the_fix(tmp_path):
    write_copy(tmp_path)
    with pytest.raises(UsageError, match=r"data.validation_examples is 12 but the decoded training copy in .* has "
                                         r"only 12 images; hold out fewer \(at most 11\)"):
        input_fn(TRAIN, None, data_dir=str(tmp_path), batch_size_per_replica=8, validation_examples=12)
