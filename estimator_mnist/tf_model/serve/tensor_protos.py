"""TensorProtos of Serving's gRPC API into numpy arrays and back, as TensorFlow's Tensor::FromProto and
Tensor::AsProtoField do (tensorflow/core/framework/tensor.cc), with the errors Serving gives.

FromProto: the dtype and shape must be valid; `tensor_content`, if any,
holds exactly the tensor's bytes; otherwise the typed `*_val` field holds
its values, with fewer values filled out with the last one (none: zeros)
and extra ones ignored. A proto that fails that is "tensor parsing error:
ALIAS" (saved_model/util.cc GetInputValues). numpy's dtypes stand in for
TensorFlow's; a dtype numpy has no twin for (half, bfloat16, complex,
quantized) is never decoded: no signature here takes one, so the session's
"Expects arg[...]" error is given for it. Sizes are checked before
anything is allocated.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
from tensorflow.core.framework import tensor_pb2, types_pb2

from estimator_mnist.tf_model.serve.serving_api import ERR_ELEMENTS, MAX_ELEMENTS
from estimator_mnist.tf_model.serve.serving_errors import invalid, ServingError

DT = types_pb2.DataType
# dtype -> (numpy dtype, the TensorProto field of its values)
DECODED = {DT.Value("DT_FLOAT"): (np.float32, "float_val"), DT.Value("DT_DOUBLE"): (np.float64, "double_val"),
           DT.Value("DT_INT32"): (np.int32, "int_val"), DT.Value("DT_INT16"): (np.int16, "int_val"),
           DT.Value("DT_INT8"): (np.int8, "int_val"), DT.Value("DT_UINT8"): (np.uint8, "int_val"),
           DT.Value("DT_UINT16"): (np.uint16, "int_val"), DT.Value("DT_INT64"): (np.int64, "int64_val"),
           DT.Value("DT_UINT32"): (np.uint32, "uint32_val"), DT.Value("DT_UINT64"): (np.uint64, "uint64_val"),
           DT.Value("DT_BOOL"): (np.bool_, "bool_val"), DT.Value("DT_STRING"): (object, "string_val")}
MAX_DIMS = 254  # TensorShape's kMaxDims
ERR_PARSING = "tensor parsing error: {alias}"
ERR_DTYPE = "Expects arg[{index}] to be {expected} but {given} is provided"  # FunctionCallFrame::SetArgs


def dtype_string(dtype: int) -> str:
    """DataTypeString: DT_FLOAT -> "float"."""
    name = DT.Name(dtype) if dtype in DT.values() else f"unknown dtype enum ({dtype})"
    return name[3:].lower() if name.startswith("DT_") else name


def shape_of(proto: tensor_pb2.TensorProto, alias: str) -> Tuple[int, ...]:
    """TensorShape::IsValid, and the element count bounded before anything is made of it."""
    shape = proto.tensor_shape
    if shape.unknown_rank or len(shape.dim) > MAX_DIMS or any(dim.size < 0 for dim in shape.dim):
        raise invalid(ERR_PARSING.format(alias=alias))
    dims = tuple(dim.size for dim in shape.dim)
    count = 1
    for size in dims:
        count *= size
    if count >= 2 ** 63:
        raise invalid(ERR_PARSING.format(alias=alias))
    if count > MAX_ELEMENTS:
        raise invalid(ERR_ELEMENTS.format(name=alias, count=count, limit=MAX_ELEMENTS))
    return dims


def _strings_from_content(content: bytes, count: int):
    """DecodeStringList: `count` varint lengths, then the strings one after another."""
    lengths, position = [], 0
    for _ in range(count):
        value, shift = 0, 0
        while True:
            if position >= len(content) or shift > 63:
                return None
            byte = content[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        lengths.append(value)
    if position + sum(lengths) != len(content):
        return None
    out = []
    for length in lengths:
        out.append(content[position:position + length])
        position += length
    return out


def _filled(values, count: int, numpy_dtype) -> np.ndarray:
    """FromProtoField: at most `count` values, the last one repeated to fill (none: the dtype's zero)."""
    if numpy_dtype is object:
        array = np.empty(count, dtype=object)
        given = list(values[:count])
        array[:] = (given + [given[-1]] * (count - len(given))) if given else [b""] * count
        return array
    given = np.asarray(values[:count])
    if not len(given):
        return np.zeros(count, dtype=numpy_dtype)
    if len(given) < count:
        given = np.concatenate([given, np.repeat(given[-1:], count - len(given))])
    return given.astype(numpy_dtype)


def to_array(proto: tensor_pb2.TensorProto, alias: str, expected_dtype: int, index: int) -> np.ndarray:
    """One input of a PredictRequest: FromProto, then the dtype the signature's placeholder takes."""
    if proto.dtype == DT.Value("DT_INVALID") or proto.dtype not in DT.values() or proto.dtype > 100:
        raise invalid(ERR_PARSING.format(alias=alias))  # an unknown enum, or a reference type
    dims = shape_of(proto, alias)
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if proto.dtype not in DECODED:
        raise invalid(ERR_DTYPE.format(index=index, expected=dtype_string(expected_dtype),
                                       given=dtype_string(proto.dtype)))
    numpy_dtype, field = DECODED[proto.dtype]
    if proto.tensor_content:
        if numpy_dtype is object:
            strings = _strings_from_content(proto.tensor_content, count)
            if strings is None:
                raise invalid(ERR_PARSING.format(alias=alias))
            array = _filled(strings, count, object)
        else:
            if len(proto.tensor_content) != count * np.dtype(numpy_dtype).itemsize:
                raise invalid(ERR_PARSING.format(alias=alias))
            array = np.frombuffer(proto.tensor_content, dtype=np.dtype(numpy_dtype).newbyteorder("<")).astype(
                numpy_dtype)
    else:
        array = _filled(getattr(proto, field), count, numpy_dtype)
    if proto.dtype != expected_dtype:
        raise invalid(ERR_DTYPE.format(index=index, expected=dtype_string(expected_dtype),
                                       given=dtype_string(proto.dtype)))
    return array.reshape(dims)


# numpy dtype kind and size -> (DataType, the field AsProtoField fills)
def _encoding(array: np.ndarray) -> Tuple[int, str]:
    if array.dtype == object or array.dtype.kind == "S":
        return DT.Value("DT_STRING"), "string_val"
    for dtype, (numpy_dtype, field) in DECODED.items():
        if numpy_dtype is not object and array.dtype == np.dtype(numpy_dtype):
            return dtype, field
    raise ServingError("INTERNAL", f"an output of dtype {array.dtype} cannot be written as a TensorProto")


def fill(proto: tensor_pb2.TensorProto, array: np.ndarray) -> tensor_pb2.TensorProto:
    """Tensor::AsProtoField into `proto` (a response's map entry, filled in place: a copy costs as much again
    with protobuf's Python implementation): the dtype, the shape, the values in the typed field."""
    array = np.asarray(array)
    dtype, field = _encoding(array)
    proto.dtype = dtype
    for size in array.shape:
        proto.tensor_shape.dim.add().size = size
    values = array.ravel()
    if field == "string_val":
        proto.string_val.extend(value if isinstance(value, bytes) else str(value).encode() for value in values)
    else:
        getattr(proto, field).extend(values.tolist())
    return proto


def from_array(array: np.ndarray) -> tensor_pb2.TensorProto:
    return fill(tensor_pb2.TensorProto(), array)
