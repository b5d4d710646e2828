"""`estimator-mnist predict`: which export to use, what each file holds, and the lines it prints. No TensorFlow.

Image files go to the export's bytes signature as they are, so the digit is
made inside the exported graph exactly as for a Serving client (digits.py);
arrays (.npy, MNIST IDX) already are MNIST digits and go to the `images`
signature. inference.py runs the export.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np

from estimator_mnist import storage
from estimator_mnist.errors import UsageError
from estimator_mnist.model_files import exports
from estimator_mnist.storage.urls import check_url
from estimator_mnist.mnist_data.idx_files import parse_idx
from estimator_mnist.startup_noise import before_import

ERR_NO_EXPORT = ("{path}: no SavedModel there: give an export directory (it holds saved_model.pb), a directory of "
                 "exports (a sweep's ensemble/), a model_dir (its newest export under export/*/ is taken) or a run "
                 "directory with one; a run exports after "
                 "its first evaluation")
ERR_ARRAY_SHAPE = "{file}: an array of shape {shape}; predict takes [28,28], [N,28,28] or [N,28,28,1] digits"
ERR_ARRAY_DTYPE = "{file}: an array of {dtype}; predict takes uint8 (0-255) or floats in [0, 1]"
ERR_ARRAY_RANGE = "{file}: float values outside [0, 1] (from {low:g} to {high:g}); scale them to [0, 1] or save uint8"
ERR_IDX_LABELS = "{file}: an IDX label file (magic 2049); give the image file (magic 2051)"
ERR_UNREADABLE = "{file}: cannot be read ({reason})"


@dataclass(frozen=True)
class Item:
    """One file's images: encoded bytes (one image) or an [N,28,28,1] float array."""

    file: str
    encoded: Optional[bytes] = None
    array: Optional[np.ndarray] = None

    @property
    def count(self) -> int:
        return 1 if self.encoded is not None else len(self.array)


def find_export(path: str) -> str:
    """An export directory itself, else the newest export in an export base (an ensemble's), of a model_dir, or of
    a run directory's model_dir (model_files/exports.py); a gs:// URL names any of these but a run directory.
    Other schemes: one line."""
    path = check_url(path, "predict", "--model") or os.path.normpath(path)
    storage.check_bucket(path)  # a bucket that does not exist, or no credentials: one line, exit 2
    export = exports.newest(path)
    if export is None:
        raise UsageError(ERR_NO_EXPORT.format(path=path))
    return export


def _as_digits(file: str, array: np.ndarray) -> np.ndarray:
    if array.ndim == 2:
        array = array[None]
    if array.ndim == 3:
        array = array[..., None]
    if array.ndim != 4 or array.shape[1:] != (28, 28, 1):
        raise UsageError(ERR_ARRAY_SHAPE.format(file=file, shape=list(array.shape)))
    if array.dtype == np.uint8:
        return array.astype(np.float32) / 255.0
    if not np.issubdtype(array.dtype, np.floating):
        raise UsageError(ERR_ARRAY_DTYPE.format(file=file, dtype=array.dtype))
    if array.size and (array.min() < 0.0 or array.max() > 1.0):
        raise UsageError(ERR_ARRAY_RANGE.format(file=file, low=float(array.min()), high=float(array.max())))
    return array.astype(np.float32)


def _load_npy(file: str, raw: bytes) -> np.ndarray:
    """The array of a .npy file's bytes. Its header is checked first: NumPy allocates the shape it claims."""
    stream = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(stream)
        shape, _, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)(stream)
        claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if claimed > len(raw) - stream.tell():
            raise ValueError(f"its header claims {claimed} bytes of data, the file holds {len(raw) - stream.tell()}")
        return np.load(io.BytesIO(raw), allow_pickle=False)
    # NumPy 1.26 parses the header with ast.literal_eval: a damaged one raises SyntaxError, tokenize.TokenError,
    # ValueError or TypeError (tests/unit/test_predict.py pins the ones the fuzzing found).
    except Exception as exc:  # pylint: disable=broad-except
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise UsageError(ERR_UNREADABLE.format(file=file, reason=f"not a NumPy .npy array: {reason}")) from None


def read_item(file: str) -> Item:
    """What a file holds; UsageError (one line, naming the file) if it cannot be used."""
    try:
        raw = Path(file).read_bytes()
    except OSError as exc:
        raise UsageError(ERR_UNREADABLE.format(file=file, reason=exc.strerror or exc)) from None
    if file.endswith(".npy"):
        return Item(file, array=_as_digits(file, _load_npy(file, raw)))
    if raw[:2] == b"\x1f\x8b" or raw[:4] in (b"\x00\x00\x08\x03", b"\x00\x00\x08\x01"):
        from estimator_mnist.mnist_data.idx_files import read_idx  # gzipped or not

        try:
            magic, array, _ = read_idx(Path(file)) if raw[:2] == b"\x1f\x8b" else parse_idx(raw)
        except (OSError, EOFError, ValueError, zlib.error) as exc:  # zlib.error: a corrupt gzip stream
            raise UsageError(ERR_UNREADABLE.format(file=file, reason=f"not an MNIST IDX file: {exc}")) from None
        if magic == 2049:
            raise UsageError(ERR_IDX_LABELS.format(file=file))
        return Item(file, array=_as_digits(file, array))
    if not raw:
        raise UsageError(ERR_UNREADABLE.format(file=file, reason="the file is empty"))
    return Item(file, encoded=raw)


def result_line(file: str, index: int, probabilities) -> str:
    digit = int(np.argmax(probabilities))
    return f"{file}[{index}]: digit {digit} (p={float(probabilities[digit]):.3f})"


def result_record(file: str, index: int, probabilities, top_k: int) -> dict:
    order = np.argsort(-np.asarray(probabilities))[:top_k]
    return {"file": file, "index": index, "class": int(order[0]),
            "probability": float(probabilities[order[0]]),
            "probabilities": [round(float(p), 6) for p in probabilities],
            "top_k": [{"class": int(c), "probability": float(probabilities[c])} for c in order]}


def run(export_path: str, files: List[str], invert: str, as_json: bool, top_k: int, out, err) -> int:
    """Classifies every readable file; each unreadable one gets a line on `err`. 0, or 2 if any file failed."""
    export_dir = find_export(export_path)
    items, failed = [], 0
    for file in files:
        try:
            items.append(read_item(file))
        except UsageError as exc:
            print(f"estimator-mnist: error: {exc}", file=err, flush=True)
            failed += 1
    before_import()  # TensorFlow's start-up notices say nothing about digits (startup_noise.py)
    from estimator_mnist.tf_model.inference import Classifier

    records = []
    with Classifier(export_dir) as classifier:
        for item in items:
            try:
                probabilities = classifier.probabilities(item, invert)
            except UsageError as exc:
                print(f"estimator-mnist: error: {exc}", file=err, flush=True)
                failed += 1
                continue
            for index, row in enumerate(probabilities):
                if as_json:
                    records.append(result_record(item.file, index, row, top_k))
                else:
                    print(result_line(item.file, index, row), file=out, flush=True)
    if as_json:
        print(json.dumps({"export": export_dir, "predictions": records}, indent=1), file=out)
    return 2 if failed else 0
