"""Fuzzed image files (Hypothesis): 100 mutated files in one `predict` call, through a real export.

Each file is classified or named in one error line, never both and never
neither; the call exits 2 when any file is bad and 0 otherwise, and prints no
traceback; the intact files are still classified. The export is a small real
one (export.py's signatures over one dense layer), so every encoded file goes
through TensorFlow's decoders and digits.py as `predict` and Serving run them.
"""

import gzip
import io
import re
import struct

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from estimator_mnist.tf_model import predict
from estimator_mnist.tf_model.export import signature_defs, write_saved_model

FILES_PER_CALL = 100
# A 1x1 GIF89a: TensorFlow decodes GIF but cannot encode it.
TINY_GIF = bytes.fromhex("47494638396101000100800000ffffff00000021f90401000000002c00000000010001000002024401003b")


def _digit() -> np.ndarray:
    image = np.zeros((28, 28), np.uint8)
    image[6:22, 12:16] = 255  # a "1"
    return image


def _bmp(image: np.ndarray) -> bytes:
    """A 24-bit BMP, written by hand (no imaging library in the pins)."""
    height, width = image.shape
    row = (width * 3 + 3) & ~3
    pixels = b"".join(np.repeat(image[y], 3).tobytes().ljust(row, b"\0") for y in range(height - 1, -1, -1))
    header = struct.pack("<2sIHHI", b"BM", 54 + len(pixels), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 2835, 2835, 0, 0)
    return header + info + pixels


def _seeds() -> dict:
    image = _digit()
    rgba = np.dstack([np.full_like(image, 40)] * 3 + [image])
    npy = io.BytesIO()
    np.save(npy, image)
    idx = struct.pack(">IIII", 2051, 1, 28, 28) + image.tobytes()
    return {"grey.png": tf.io.encode_png(image[..., None]).numpy(), "rgba.png": tf.io.encode_png(rgba).numpy(),
            "digit.jpg": tf.io.encode_jpeg(image[..., None]).numpy(), "digit.bmp": _bmp(image), "tiny.gif": TINY_GIF,
            "digit.npy": npy.getvalue(), "digit.idx": idx, "digit.idx.gz": gzip.compress(idx)}


SEEDS = _seeds()


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    """A real export with both signatures, over one dense layer (its weights do not matter here)."""
    def build():
        layer = tf.keras.layers.Dense(10)
        return signature_defs(lambda images: layer(tf.reshape(images, [-1, 28 * 28])))

    def restore(session):
        session.run(tf.compat.v1.global_variables_initializer())

    return write_saved_model(str(tmp_path_factory.mktemp("export")), build, restore)


def _mutate(data: bytes, edits) -> bytes:
    data = bytearray(data)
    for kind, position, blob in edits:
        if not data:  # cut to nothing: an empty file, which is a case of its own
            break
        position %= len(data)
        if kind == "flip":
            data[position] ^= blob[0] if blob else 0xFF
        elif kind == "cut":
            del data[position:]
        elif kind == "insert":
            data[position:position] = blob
        else:  # overwrite: headers hold the sizes and offsets decoders trust
            data[position:position + len(blob)] = blob
    return bytes(data)


edits = st.lists(st.tuples(st.sampled_from(["flip", "cut", "insert", "overwrite"]), st.integers(0, 4096),
                           st.binary(min_size=1, max_size=8) | st.sampled_from([b"\xff\xff\xff\xff", b"\0\0\0\0",
                                                                                 b"\x7f\xff\xff\xff"])),
               min_size=1, max_size=3)
mutated_files = st.lists(st.tuples(st.sampled_from(sorted(SEEDS)), edits), min_size=FILES_PER_CALL,
                         max_size=FILES_PER_CALL)


# No shrinking: each example is a TensorFlow run over 100 files, and shrinking one took minutes. A failure
# prints its files' mutations; the file it names is the minimal example to add to the regular tests.
@settings(max_examples=3, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(mutated_files)
def test_mutated_files_in_one_call(export_dir, tmp_path, mutations):
    folder = tmp_path / f"call-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    files = []
    for number, (seed, edit) in enumerate(mutations):
        path = folder / f"m{number:03d}-{seed}"
        path.write_bytes(_mutate(SEEDS[seed], edit))
        files.append(str(path))
    for seed, data in SEEDS.items():  # the intact ones, after the mutated ones
        (folder / seed).write_bytes(data)
        files.append(str(folder / seed))
    out, err = io.StringIO(), io.StringIO()
    code = predict.run(export_dir, files, "auto", False, 3, out, err)
    errors, results = err.getvalue().splitlines(), out.getvalue().splitlines()
    assert "Traceback" not in err.getvalue() + out.getvalue()
    assert all(re.match(r"estimator-mnist: error: \S", line) for line in errors), errors
    for file in files:
        named = [line for line in errors if f" {file}: " in line]
        classified = [line for line in results if line.startswith(f"{file}[")]
        assert len(named) + bool(classified) == 1, (file, named, classified)
    for seed in SEEDS:
        assert any(line.startswith(f"{folder / seed}[0]: digit ") for line in results), seed
    assert code == (2 if errors else 0)
