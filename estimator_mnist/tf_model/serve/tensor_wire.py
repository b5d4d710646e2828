"""A PredictRequest's packed `float_val` moved to `tensor_content` in the message's bytes, before protobuf parses
it: the same tensor, read in a millisecond rather than in seconds.

The protobuf runtime of the pins (3.20.3, pure Python on Python 3.11)
decodes a packed repeated float one element at a time: 1,000 images as
`float_val` (3.1 MB) take about a second of CPU. A packed `float_val`'s
payload is the floats' little-endian bytes, which is exactly what
`tensor_content` holds for a DT_FLOAT tensor; and TensorFlow's FromProto
reads either to the same tensor when the count of values equals the
shape's element count (fewer are filled out with the last one, more are
ignored: those cases are left to protobuf, and so is anything unusual).
So a TensorProto of DT_FLOAT with no `tensor_content`, one packed
`float_val` of exactly its shape's values and nothing else repeated has
its field 5 renumbered 4: one byte of its tag. Wire format:
https://protobuf.dev/programming-guides/encoding/.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

DT_FLOAT = 1
# Field numbers: PredictRequest.inputs = 2 (a map entry: key 1, value 2); TensorProto: dtype 1, tensor_shape 2,
# tensor_content 4, float_val 5; TensorShapeProto.dim 2 (Dim.size 1), unknown_rank 3.
INPUTS, VALUE, DTYPE, SHAPE, CONTENT, FLOAT_VAL, DIM, UNKNOWN_RANK = 2, 2, 1, 2, 4, 5, 2, 3
VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
FLOAT_VAL_TAG, CONTENT_TAG = bytes([FLOAT_VAL << 3 | LEN]), bytes([CONTENT << 3 | LEN])
MIN_BYTES = 4096  # smaller float_vals are parsed as they are: rewriting them gains nothing

Field = Tuple[int, int, int, int, int]  # number, wire type, start of the field (its tag), start, end of its value


def varint(value: int) -> bytes:
    """One varint (a tag, a length, a size); a negative int64 as its two's complement, as protobuf writes it."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value >> 7 else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _varint(data, position: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _fields(data, start: int = 0, end: Optional[int] = None) -> List[Field]:
    """The fields of one message's bytes; ValueError for what is not a well-formed message."""
    end, out, position = len(data) if end is None else end, [], start
    while position < end:
        tag_start = position
        tag, position = _varint(data, position)
        number, wire = tag >> 3, tag & 7
        if wire == VARINT:
            _, stop = _varint(data, position)
        elif wire == FIXED64:
            stop = position + 8
        elif wire == FIXED32:
            stop = position + 4
        elif wire == LEN:
            size, position = _varint(data, position)
            stop = position + size
        else:
            raise ValueError("a group or an unknown wire type")
        if stop > end or number == 0:
            raise ValueError("truncated field")
        out.append((number, wire, tag_start, position, stop))
        position = stop
    return out


def _element_count(data, start: int, end: int) -> Optional[int]:
    count = 1
    for number, wire, _, value_start, value_end in _fields(data, start, end):
        if number == UNKNOWN_RANK:
            return None
        if number == DIM and wire == LEN:
            sizes = [_varint(data, s)[0] for n, w, _, s, _ in _fields(data, value_start, value_end)
                     if n == 1 and w == VARINT]
            size = sizes[-1] if sizes else 0
            if size >= 1 << 63:  # a negative int64
                return None
            count *= size
    return count


def _float_val_tag(data, start: int, end: int) -> Optional[int]:
    """Where the TensorProto's float_val tag is, if moving it to tensor_content reads the same, else None."""
    fields = _fields(data, start, end)
    numbers = [f[0] for f in fields]
    if numbers.count(FLOAT_VAL) != 1 or numbers.count(SHAPE) > 1 or CONTENT in numbers:
        return None
    dtypes = [_varint(data, f[3])[0] for f in fields if f[0] == DTYPE and f[1] == VARINT]
    _, wire, tag_start, values_start, values_end = next(f for f in fields if f[0] == FLOAT_VAL)
    shapes = [f for f in fields if f[0] == SHAPE and f[1] == LEN]
    if not dtypes or dtypes[-1] != DT_FLOAT or wire != LEN or values_end - values_start < MIN_BYTES:
        return None
    if bytes(data[tag_start:tag_start + 1]) != FLOAT_VAL_TAG or values_start - tag_start < 2:
        return None  # a tag written in more bytes than it needs: left to protobuf
    count = _element_count(data, shapes[0][3], shapes[0][4]) if shapes else 1
    return tag_start if count is not None and count * 4 == values_end - values_start else None


def packed_floats_as_content(raw: bytes) -> bytes:
    """A PredictRequest's bytes with every input's packed float_val moved to tensor_content where that reads
    the same: the one byte of each such field's tag changed (5 and 4 are both one-byte tags, so no length
    around it changes), in one copy; the very bytes when there is none, or when they are no well-formed
    message (protobuf's own parser then says what is wrong)."""
    data = memoryview(raw)  # slices of it are no copies
    try:
        tags = [_float_val_tag(data, inner_start, inner_end)
                for number, wire, _, start, end in _fields(data) if number == INPUTS and wire == LEN
                for inner, inner_wire, _, inner_start, inner_end in _fields(data, start, end)
                if inner == VALUE and inner_wire == LEN]
    except ValueError:
        return raw
    tags = [tag for tag in tags if tag is not None]
    if not tags:
        return raw
    out = bytearray(raw)
    for tag in tags:
        out[tag] = CONTENT_TAG[0]
    return bytes(out)
