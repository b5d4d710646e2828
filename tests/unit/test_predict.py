"""predict's front end (no TensorFlow): which export, what each file holds, the lines it prints."""

import gzip
import io
import json
import re
import struct

import numpy as np
import pytest

from estimator_mnist.tf_model import predict
from estimator_mnist.errors import UsageError
from estimator_mnist.tf_model.predict import (ERR_ARRAY_DTYPE, ERR_ARRAY_RANGE, ERR_ARRAY_SHAPE, ERR_IDX_LABELS,
                                     ERR_NO_EXPORT, ERR_UNREADABLE, find_export, read_item)
from tests.helpers import make_export


def pattern(template: str) -> str:
    """A regex for an error template, any value in each {field}."""
    return ".*".join(re.escape(part) for part in re.split(r"\{[a-z_]+(?::[^}]*)?\}", template))


def test_the_newest_export_of_a_model_dir_or_run_dir_is_taken(tmp_path):
    model_dir = tmp_path / "run" / "model"
    make_export(model_dir, 100)
    newest = make_export(model_dir, 200)
    (model_dir / "export" / "latest" / "temp-300").mkdir()  # being written: never taken
    assert find_export(str(model_dir)) == str(newest)
    assert find_export(str(tmp_path / "run")) == str(newest)
    assert find_export(str(newest)) == str(newest)
    elsewhere = tmp_path / "elsewhere"
    make_export(elsewhere, 400)
    (tmp_path / "other_run").mkdir()
    (tmp_path / "other_run" / "run_summary.json").write_text(json.dumps({"model_dir": str(elsewhere)}))
    assert find_export(str(tmp_path / "other_run")).endswith("400")


def test_no_export_is_named_with_what_to_give(tmp_path):
    with pytest.raises(UsageError, match=pattern(ERR_NO_EXPORT)):
        find_export(str(tmp_path))


def idx_bytes(magic, array):
    header = struct.pack(">II", magic, len(array)) + (struct.pack(">II", 28, 28) if magic == 2051 else b"")
    return header + array.astype(np.uint8).tobytes()


def test_arrays_and_idx_files_become_float_digits(tmp_path):
    digits = np.random.RandomState(0).randint(0, 256, size=(3, 28, 28)).astype(np.uint8)
    for name, array in (("one.npy", digits[0]), ("three.npy", digits), ("four.npy", digits[..., None])):
        np.save(tmp_path / name, array)
        item = read_item(str(tmp_path / name))
        assert item.array.shape == (len(array) if array.ndim > 2 else 1, 28, 28, 1)
        assert item.array.dtype == np.float32 and item.array.max() <= 1.0
    np.save(tmp_path / "floats.npy", digits.astype(np.float64) / 255.0)
    assert np.allclose(read_item(str(tmp_path / "floats.npy")).array[..., 0], digits / 255.0)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(2051, digits))
    (tmp_path / "images.gz").write_bytes(gzip.compress(idx_bytes(2051, digits)))
    for name in ("t10k-images-idx3-ubyte", "images.gz"):
        assert np.allclose(read_item(str(tmp_path / name)).array[..., 0], digits / 255.0)
    (tmp_path / "digit.png").write_bytes(b"\x89PNG anything")
    assert read_item(str(tmp_path / "digit.png")).encoded == b"\x89PNG anything"


def _npy_bytes(array) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array)
    return stream.getvalue()


NPY_HEADER = _npy_bytes(np.zeros((28, 28), np.uint8))


@pytest.mark.parametrize("name, content, error", [
    ("wide.npy", np.zeros((2, 28, 30)), ERR_ARRAY_SHAPE),
    ("ints.npy", np.zeros((28, 28), np.int32), ERR_ARRAY_DTYPE),
    ("bright.npy", np.full((28, 28), 255.0), ERR_ARRAY_RANGE),
    ("labels-idx1-ubyte", idx_bytes(2049, np.arange(5)), ERR_IDX_LABELS),
    ("short-idx3-ubyte", idx_bytes(2051, np.zeros((2, 28, 28)))[:-5], ERR_UNREADABLE),
    ("text.npy", b"not numpy", ERR_UNREADABLE),
    ("empty.png", b"", ERR_UNREADABLE),
    # Found by tests/unit/test_fuzzed_images.py (tracebacks): a damaged deflate stream (zlib.error), a NUL in a
    # .npy header (SyntaxError from its literal_eval), and a header whose shape claims more than the file holds.
    # mtime=0: the bytes are the test's id, which must be the same in every pytest-xdist worker.
    ("damaged.idx.gz", gzip.compress(idx_bytes(2051, np.zeros((2, 28, 28))), mtime=0)[:10] + b"\xff" * 40,
     ERR_UNREADABLE),
    ("nul-header.npy", NPY_HEADER.replace(b"(28, 28)", b"(28, 28\x00"), ERR_UNREADABLE),
    ("huge-claim.npy", NPY_HEADER.replace(b"(28, 28)", b"(10**9,)".ljust(8)), ERR_UNREADABLE),
    ("huge-shape.npy", NPY_HEADER.replace(b"(28, 28)", b"(99999,9999999999)".ljust(8))[:-700], ERR_UNREADABLE),
])
def test_each_unusable_file_gets_one_line_naming_it(tmp_path, name, content, error):
    path = tmp_path / name
    if isinstance(content, np.ndarray):
        np.save(path, content)
        path = tmp_path / name  # np.save keeps the .npy name
    else:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=pattern(error)) as caught:
        read_item(str(path))
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(UsageError, match=pattern(ERR_UNREADABLE)):
        read_item(str(tmp_path / "nope.png"))


def test_result_lines_and_records():
    probabilities = np.array([0.01, 0.02, 0.9, 0.07, 0, 0, 0, 0, 0, 0])
    assert predict.result_line("a.png", 0, probabilities) == "a.png[0]: digit 2 (p=0.900)"
    record = predict.result_record("a.png", 4, probabilities, top_k=2)
    assert record["class"] == 2 and record["index"] == 4 and len(record["probabilities"]) == 10
    assert [t["class"] for t in record["top_k"]] == [2, 3]


def test_unreadable_files_are_reported_and_the_others_classified(tmp_path, monkeypatch):
    class FakeClassifier:
        def __init__(self, export_dir):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def probabilities(self, item, invert):
            return np.eye(10)[[7] * item.count]

    import estimator_mnist.tf_model.inference as inference

    monkeypatch.setattr(inference, "Classifier", FakeClassifier)
    make_export(tmp_path / "model", 1)
    np.save(tmp_path / "good.npy", np.zeros((2, 28, 28), np.uint8))
    out, err = io.StringIO(), io.StringIO()
    code = predict.run(str(tmp_path / "model"), [str(tmp_path / "missing.png"), str(tmp_path / "good.npy")],
                       "auto", False, 3, out, err)
    assert code == 2
    assert out.getvalue().splitlines() == [f"{tmp_path}/good.npy[0]: digit 7 (p=1.000)",
                                           f"{tmp_path}/good.npy[1]: digit 7 (p=1.000)"]
    assert err.getvalue().count("\n") == 1 and "missing.png" in err.getvalue()
