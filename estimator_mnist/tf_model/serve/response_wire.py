"""A PredictResponse's bytes written straight from the outputs' numpy bytes, byte for byte what protobuf's own
encoder writes for the message tensor_protos.fill() builds (tests/unit/test_serve_wire.py fuzzes it against it).

Serving answers in the proto field form by default (`float_val`, not
`tensor_content`), and clients read it. protobuf 3.20.3, the pins' runtime,
is pure Python on Python 3.11: `extend` checks every value, then its packed
encoder writes them one at a time; 10,000 images' answers took 0.3-0.5 s of
the GIL. Here a packed `float_val` is its tag, its length and the floats'
little-endian bytes (numpy's `tobytes`); integers are varints made by numpy
for the whole array at once; the rest of the message is a few fields. No
Python runs per value. A dtype with no packed field (strings) is left to
protobuf. Wire format: https://protobuf.dev/programming-guides/encoding/.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from estimator_mnist.tf_model.serve.tensor_protos import from_array
from estimator_mnist.tf_model.serve.tensor_wire import varint

LEN, VARINT = 2, 0
MAX_VARINT_BYTES = 10
# numpy dtype -> (DataType, TensorProto field number, how the values are written): AsProtoField's fields.
FIELDS = {np.dtype(np.float32): (1, 5, "<f4"), np.dtype(np.float64): (2, 6, "<f8"),
          np.dtype(np.int32): (3, 7, "varint"), np.dtype(np.uint8): (4, 7, "varint"),
          np.dtype(np.int16): (5, 7, "varint"), np.dtype(np.int8): (6, 7, "varint"),
          np.dtype(np.int64): (9, 10, "varint"), np.dtype(np.bool_): (10, 11, "varint"),
          np.dtype(np.uint16): (17, 7, "varint"), np.dtype(np.uint32): (22, 16, "varint"),
          np.dtype(np.uint64): (23, 17, "varint")}


def varints(values: np.ndarray) -> bytes:
    """Every value's varint, one after another, made by numpy for the whole array: a signed value sign-extended
    to 64 bits, as protobuf writes int32 and int64 (ten bytes for a negative one)."""
    flat = values.ravel()
    if flat.dtype == np.bool_ or (flat.size and flat.min() >= 0 and flat.max() < 0x80):
        return flat.astype(np.uint8).tobytes()  # one byte each: class ids, booleans
    wide = flat.astype(np.uint64) if flat.dtype.kind == "u" else flat.astype(np.int64).view(np.uint64)
    shifts = np.arange(MAX_VARINT_BYTES, dtype=np.uint64) * np.uint64(7)
    parts = wide[:, None] >> shifts[None, :]
    lengths = np.count_nonzero(parts[:, 1:], axis=1) + 1  # the groups after the first that hold bits
    groups = (parts & np.uint64(0x7F)).astype(np.uint8)
    columns = np.arange(MAX_VARINT_BYTES)[None, :]
    groups[columns < (lengths - 1)[:, None]] |= 0x80
    return groups[columns < lengths[:, None]].tobytes()


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | LEN) + varint(len(payload)) + payload


def _shape(shape) -> bytes:
    """TensorShapeProto: a Dim per dimension (an empty Dim for size 0, protobuf's default)."""
    return b"".join(field(2, varint(1 << 3 | VARINT) + varint(size) if size else b"") for size in shape)


def tensor_bytes(array: np.ndarray) -> bytes:
    """The TensorProto of `array`, as Tensor::AsProtoField fills it (the dtype, the shape, the typed values)."""
    array = np.asarray(array)
    if array.dtype not in FIELDS:
        return from_array(array).SerializeToString()  # strings: no packed field, protobuf writes them
    dtype, number, form = FIELDS[array.dtype]
    out = varint(1 << 3 | VARINT) + varint(dtype)
    if array.ndim:
        out += field(2, _shape(array.shape))
    if array.size:
        values = np.ascontiguousarray(array).astype(form).tobytes() if form != "varint" else varints(array)
        out += field(number, values)
    return out


def predict_response_bytes(name: str, signature: str, version: int, outputs: Dict[str, np.ndarray]) -> bytes:
    """PredictResponse: `outputs` (map entries in their order, key 1 and value 2), then the model spec (name 1,
    version 2 as an Int64Value, signature_name 3)."""
    entries = b"".join(field(1, (field(1, key.encode()) if key else b"") + field(2, tensor_bytes(array)))
                       for key, array in outputs.items())
    spec = (field(1, name.encode()) if name else b"") + field(2, varint(1 << 3 | VARINT) + varint(version)
                                                             if version else b"")
    spec += field(3, signature.encode()) if signature else b""
    return entries + field(2, spec)
