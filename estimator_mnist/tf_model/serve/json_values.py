"""JSON values as TensorFlow Serving reads them: parsing, the debug text its errors quote, values into tensors.

Ported from tensorflow/serving's util/json_tensor.cc (ParseJson,
JsonValueToDebugString, GetDenseTensorShape, FillTensorProto,
AddValueToTensor, the b64 objects), with its error texts. Serving parses
with rapidjson; Python's json module stands in for it, with rapidjson's
messages for the same mistakes, NaN and Infinity accepted, and anything
after the first value ignored (kParseStopWhenDoneFlag). Numbers are read as
rapidjson reads them: an integer beyond 64 bits is a double, and a number
beyond a double's range is "Number too big to be stored in double." (where
Python would make it inf, or fail on 4,300 digits); a finite double beyond
float's range becomes inf in a DT_FLOAT tensor, as Serving's GetFloat()
makes it. Values nested deeper than MAX_DEPTH are refused (rapidjson would
exhaust its stack). No TensorFlow.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Iterator, List

import numpy as np

from estimator_mnist.tf_model.serve.serving_errors import invalid, ServingError

DEBUG_LIMIT = 256  # kMaxJsonDebugStringBytes: longer values are cut in error messages
INDENT = "    "  # rapidjson's PrettyWriter
B64_KEY = "b64"
# TensorFlow's DataTypeString of the dtypes a signature here may take, and the numpy dtype each becomes.
DTYPES = {"DT_FLOAT": ("float", np.float32), "DT_DOUBLE": ("double", np.float64), "DT_INT32": ("int32", np.int32),
          "DT_INT64": ("int64", np.int64), "DT_BOOL": ("bool", np.bool_), "DT_STRING": ("string", object)}
INT32_RANGE = (-2 ** 31, 2 ** 31 - 1)
INT64_RANGE = (-2 ** 63, 2 ** 63 - 1)
UINT64_MAX = 2 ** 64 - 1
MAX_DEPTH = 64  # a tensor here has at most 5 levels; a deeper value is no tensor

ERR_EMPTY = "JSON Parse error: The document is empty"
ERR_PARSE = "JSON Parse error: {reason} at offset: {offset}"
ERR_TYPE = "JSON Value: {value} Type: {kind} is not of expected type: {dtype}"
ERR_BASE64_FORMAT = "JSON Value: {value} not formatted correctly for base64 data"
ERR_BASE64 = "Unable to base64 decode"
ERR_LEVEL = "JSON Value: {value} found at incorrect level: {level} in the JSON DOM. Expected at level: {rank}"
ERR_LIST_LEVEL = "Encountered list at unexpected level: {level} expected < {rank}"
ERR_LIST_SIZE = "Encountered list at unexpected size: {size} at level: {level} expected size: {expected}"
ERR_CONVERSION = "Conversion of JSON Value: {value} to type: {dtype}"
ERR_NUMBER_TOO_BIG = "Number too big to be stored in double."
ERR_DEPTH = ("JSON Value nested deeper than {limit} levels, the limit of estimator-mnist serve: no tensor has so "
             "many dimensions")
_NUMBER_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?')
# Python's json messages, and rapidjson's (GetParseError_En) for the same mistake.
_RAPIDJSON_REASONS = (
    ("Expecting value", "Invalid value."),
    ("Expecting property name enclosed in double quotes", "Missing a name for object member."),
    ("Expecting ':' delimiter", "Missing a colon after a name of object member."),
    ("Unterminated string", "Missing a closing quotation mark in string."),
    ("Invalid \\escape", "Invalid escape character in string."),
    ("Invalid \\uXXXX escape", "Incorrect hex digit after \\u escape in string."),
    ("Invalid control character", "Invalid encoding in string."),
)
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _reason(error: json.JSONDecodeError) -> str:
    if error.msg == "Expecting ',' delimiter":  # rapidjson tells the object's from the array's
        opener = max(error.doc.rfind("{", 0, error.pos), error.doc.rfind("[", 0, error.pos))
        inside_object = opener >= 0 and error.doc[opener] == "{"
        return "Missing a comma or '}' after an object member." if inside_object else \
            "Missing a comma or ']' after an array element."
    return next((ours for theirs, ours in _RAPIDJSON_REASONS if error.msg.startswith(theirs)), "Invalid value.")


class _TooBig(ValueError):
    """A number beyond a double's range, the `index`-th number of the document."""

    def __init__(self, index: int):
        super().__init__(index)
        self.index = index


def _number_readers():
    """parse_float and parse_int as rapidjson reads numbers; they count the numbers, to place an error."""
    count = [0]

    def as_double(text: str) -> float:
        value = float(text)
        count[0] += 1
        if value in (float("inf"), float("-inf")):
            raise _TooBig(count[0] - 1)
        return value

    def as_integer(text: str):
        digits = len(text.lstrip("-"))
        if digits > 20:  # beyond 64 bits whatever the digits: a double (or too big for one)
            return as_double(text)
        value = int(text)
        if not INT64_RANGE[0] <= value <= UINT64_MAX:
            return as_double(text)
        count[0] += 1
        return value

    return as_double, as_integer


def _offset_of_number(text: str, start: int, index: int) -> int:
    """Where the `index`-th number of the document starts (rapidjson's offset of a number it cannot store)."""
    numbers = (m for m in _NUMBER_OR_STRING.finditer(text, start) if not m.group().startswith('"'))
    for position, match in enumerate(numbers):
        if position == index:
            return match.start()
    return start


def _depth_at_most(value, limit: int) -> bool:
    level = [(value, 1)]
    while level:
        item, depth = level.pop()
        if depth > limit:
            return False
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        level.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def parse_document(body: bytes) -> Any:
    """The first JSON value of `body`, or Serving's parse error."""
    if not body.strip():
        raise invalid(ERR_EMPTY)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(ERR_PARSE.format(reason="Invalid encoding in string.", offset=exc.start)) from None
    start = _WHITESPACE.match(text).end()
    as_double, as_integer = _number_readers()
    try:
        value, _ = json.JSONDecoder(parse_float=as_double, parse_int=as_integer).raw_decode(text, start)
    except _TooBig as exc:
        raise invalid(ERR_PARSE.format(reason=ERR_NUMBER_TOO_BIG, offset=_offset_of_number(text, start, exc.index))) \
            from None
    except json.JSONDecodeError as exc:
        raise invalid(ERR_PARSE.format(reason=_reason(exc), offset=exc.pos)) from None
    except RecursionError:
        raise invalid(ERR_DEPTH.format(limit=MAX_DEPTH)) from None
    if not _depth_at_most(value, MAX_DEPTH):
        raise invalid(ERR_DEPTH.format(limit=MAX_DEPTH))
    return value


def _scalar(value) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float) and not np.isfinite(value):
        return "NaN" if np.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return json.dumps(value, ensure_ascii=False)


def _tokens(value, level: int, prefix: str) -> Iterator[str]:
    """rapidjson's PrettyWriter with kFormatSingleLineArray, one handler call per item."""
    if isinstance(value, dict):
        yield prefix + "{"
        for index, (key, item) in enumerate(value.items()):
            yield ("," if index else "") + "\n" + INDENT * (level + 1) + json.dumps(key, ensure_ascii=False)
            yield from _tokens(item, level + 1, ": ")
        yield ("\n" + INDENT * level if value else "") + "}"
    elif isinstance(value, list):
        yield prefix + "["
        for index, item in enumerate(value):
            yield from _tokens(item, level + 1, ", " if index else "")
        yield "]"
    else:
        yield prefix + _scalar(value)


def debug_string(value) -> str:
    """JsonValueToDebugString: the value as Serving quotes it, cut once 256 bytes are written."""
    written = ""
    for token in _tokens(value, 0, ""):
        if len(written.encode("utf-8")) >= DEBUG_LIMIT:
            break
        written += token
    return written


def kind(value) -> str:
    """JsonTypeString."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def is_b64_object(value) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(B64_KEY), str)


def decode_b64(value) -> bytes:
    if not is_b64_object(value):
        raise invalid(ERR_BASE64_FORMAT.format(value=debug_string(value)))
    text = value[B64_KEY].strip()
    try:  # absl::Base64Unescape takes the padding as optional
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise invalid(ERR_BASE64) from None


def dense_shape(value) -> List[int]:
    """GetDenseTensorShape: nested lists' sizes, following each first element."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _number_in(value, low, high) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _convert(value, dtype: str):
    """AddValueToTensor (and the b64 objects of DT_STRING) for one leaf value."""
    ok = {"DT_FLOAT": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "DT_DOUBLE": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "DT_INT32": lambda v: _number_in(v, *INT32_RANGE), "DT_INT64": lambda v: _number_in(v, *INT64_RANGE),
          "DT_BOOL": lambda v: isinstance(v, bool), "DT_STRING": lambda v: isinstance(v, str)}.get(dtype)
    if ok is None:
        raise ServingError("UNIMPLEMENTED", ERR_CONVERSION.format(value=debug_string(value), dtype=dtype))
    if isinstance(value, dict) and dtype == "DT_STRING":
        return decode_b64(value)
    if not ok(value):
        raise invalid(ERR_TYPE.format(value=debug_string(value), kind=kind(value), dtype=DTYPES[dtype][0]))
    return value.encode("utf-8") if dtype == "DT_STRING" else value


def _fill(value, level: int, shape: List[int], dtype: str, out: list) -> None:
    """FillTensorProto: every leaf at the same depth, every list of the size of its level."""
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise invalid(ERR_LEVEL.format(value=debug_string(value), level=level + 1, rank=rank))
        out.append(_convert(value, dtype))
        return
    if level >= rank:
        raise invalid(ERR_LIST_LEVEL.format(level=level, rank=rank))
    if len(value) != shape[level]:
        raise invalid(ERR_LIST_SIZE.format(size=len(value), level=level, expected=shape[level]))
    for item in value:
        _fill(item, level + 1, shape, dtype, out)


def to_array(value, dtype: str) -> np.ndarray:
    """One tensor from a JSON value, its shape that of its nested lists."""
    shape = dense_shape(value)
    values: list = []
    _fill(value, 0, shape, dtype, values)
    numpy_dtype = DTYPES[dtype][1]
    if numpy_dtype is object:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(shape)
    with np.errstate(over="ignore"):  # 1e40 into float32 is inf, as Serving's GetFloat() makes it
        return np.asarray(values, dtype=numpy_dtype).reshape(shape)
