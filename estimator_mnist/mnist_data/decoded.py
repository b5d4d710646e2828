"""The decoded copy of the prepared MNIST that the tasks read: raw uint8 pixels and labels, in TFDS's order.

TFDS stores each image as a PNG inside a TFRecord. Decoding them cost every
trainer about 2.5 s of CPU in its first epoch and 0.8 s before its first step
(the shuffle buffer's 10,000 images), the evaluator 0.8 s per evaluation, and
every task half a second to import tensorflow_datasets (docs/performance.md).
`prepare-data` therefore writes, once per machine, each split as two flat
files that TensorFlow reads whole: `<split>.images` (N x 28 x 28 bytes) and
`<split>.labels` (N bytes), with `manifest.json` giving N. The examples are in
the order `tfds.load(..., shuffle_files=False)` gives them, so training sees
the same data in the same order as when it read TFDS itself.

No TensorFlow here: the launcher checks the copy before it starts any task.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from estimator_mnist import storage

if TYPE_CHECKING:
    import numpy as np

DIRECTORY = "estimator_mnist_decoded"
FORMAT = 1
IMAGE_BYTES = 28 * 28
SPLIT_SIZES = {"train": 60000, "test": 10000}


def directory(data_dir) -> Path:
    return Path(data_dir).expanduser() / DIRECTORY


def files(data_dir, split: str) -> Tuple[Path, Path]:
    """(images file, labels file) of one split."""
    root = directory(data_dir)
    return root / f"{split}.images", root / f"{split}.labels"


def counts(data_dir) -> Optional[Dict[str, int]]:
    """Examples per split, as the copy's manifest gives them; None without a readable manifest of this format."""
    try:
        manifest = json.loads((directory(data_dir) / "manifest.json").read_text())
        if manifest.get("format") != FORMAT:
            return None
        return {str(split): int(count) for split, count in manifest["splits"].items()}
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return None


def problem(data_dir, splits=tuple(SPLIT_SIZES)) -> Optional[str]:
    """Why the copy cannot be read (missing, from another format, truncated), or None when it can."""
    found_counts = counts(data_dir)
    if found_counts is None:
        return f"no decoded copy in {directory(data_dir)}"
    for split in splits:
        count = found_counts.get(split, 0)
        if count <= 0:
            return f"the decoded copy in {directory(data_dir)} has no {split} split"
        for path, expected in zip(files(data_dir, split), (count * IMAGE_BYTES, count)):
            actual = path.stat().st_size if path.is_file() else None
            if actual != expected:
                found = "is missing" if actual is None else f"has {actual} bytes"
                return f"{path} {found}, expected {expected}"
    return None


def write(data_dir, splits: Dict[str, Tuple["np.ndarray", "np.ndarray"]], source: str) -> Path:
    """Writes the copy from (images [N, 28, 28(, 1)] uint8, labels [N]) per split, replacing any older one.

    Written into a temporary directory and renamed into place, so a copy that
    exists is complete.
    """
    import numpy as np  # here: every task's parent process imports this module, and only prepare-data writes

    data_dir = Path(data_dir).expanduser()
    final = directory(data_dir)
    staging = Path(tempfile.mkdtemp(dir=data_dir, prefix=f".{DIRECTORY}-"))
    try:
        counts = {}
        for split, (images, labels) in splits.items():
            images = np.ascontiguousarray(images, dtype=np.uint8).reshape(-1, IMAGE_BYTES)
            labels = np.ascontiguousarray(labels).astype(np.uint8).reshape(-1)
            if len(images) != len(labels):
                raise ValueError(f"{split}: {len(images)} images but {len(labels)} labels")
            images.tofile(staging / f"{split}.images")
            labels.tofile(staging / f"{split}.labels")
            counts[split] = len(labels)
        (staging / "manifest.json").write_text(json.dumps({"format": FORMAT, "source": source, "splits": counts},
                                                          indent=2) + "\n")
        os.chmod(staging, 0o755)
        # Renames within data_dir (one file system, a local disk or NFS): through the storage layer, as every
        # rename of a directory others read.
        if final.exists():
            old = Path(tempfile.mkdtemp(dir=data_dir, prefix=f".{DIRECTORY}-old-"))
            storage.move(str(final), str(old / DIRECTORY))
            storage.rmtree(str(old))
        storage.move(str(staging), str(final))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final
