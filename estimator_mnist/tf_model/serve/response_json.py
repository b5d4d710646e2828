"""Serving's response bodies: `:predict` outputs in row or columnar form, the model status, the metadata.

Ported from tensorflow/serving's util/json_tensor.cc (MakeJsonFromTensors)
and model_servers/http_rest_api_util.cc (ToJsonString of
GetModelStatusResponse and GetModelMetadataResponse, which protobuf's JSON
printer writes with every field, int64 as strings). float32 values are
written in their shortest form, as Serving's WriteDecimal does, not with
the noise digits of a widening to double. No TensorFlow.
"""

from __future__ import annotations

import base64
import json
from typing import Dict, Iterable, Tuple

import numpy as np

from estimator_mnist.tf_model.serve.serving_errors import invalid

BYTES_SUFFIX = "_bytes"  # kBytesTensorNameSuffix: such string outputs are written as {"b64": ...}
ERR_NO_SHAPE = "Tensor name: {name} has no shape information "
ERR_BATCH = "Tensor name: {name} has inconsistent batch size: {size} expecting: {expected}"


def _strings(name: str, array: np.ndarray) -> np.ndarray:
    """Each value's JSON text, made by numpy for the whole array: float32 in its shortest form (numpy's, as
    Serving's WriteDecimal writes the float, not its widening to double), NaN and Infinity as Serving's writer
    spells them; strings (no numeric hot path) one at a time."""
    if array.dtype == object or array.dtype.kind == "S":
        def text(value: bytes) -> str:
            if name.endswith(BYTES_SUFFIX):
                return json.dumps({"b64": base64.b64encode(value).decode("ascii")})
            return json.dumps(value.decode("utf-8", errors="replace"), ensure_ascii=False)
        return np.vectorize(text, otypes=[object])(array) if array.size else array.astype(object)
    if array.dtype == np.bool_:
        return np.where(array, "true", "false").astype(object)
    strings = array.astype(str).astype(object)
    if array.dtype.kind == "f":
        strings[np.isnan(array)] = "NaN"
        strings[np.isposinf(array)] = "Infinity"
        strings[np.isneginf(array)] = "-Infinity"
    return strings


def _single_line(strings: np.ndarray) -> list:
    """The text of each item along the first axis, nested arrays on one line: one join per innermost row."""
    while strings.ndim > 1:
        rows = strings.reshape(int(np.prod(strings.shape[:-1])), strings.shape[-1]).tolist()
        joined = np.empty(len(rows), dtype=object)
        joined[:] = ["[" + ", ".join(row) + "]" for row in rows]
        strings = joined.reshape(strings.shape[:-1])
    return strings.tolist()


def _whole(name: str, array: np.ndarray) -> str:
    return _single_line(_strings(name, array[None]))[0]


def predict_body(outputs: Dict[str, np.ndarray], row_format: bool) -> str:
    """MakeRowFormatJsonFromTensors or MakeColumnarFormatJsonFromTensors; one output is written without its name.
    The layout is Serving's: rapidjson's PrettyWriter with kFormatSingleLineArray (objects indented by 4, every
    array on one line)."""
    names = sorted(outputs)
    if not row_format:
        if len(names) == 1:
            return '{\n    "outputs": ' + _whole(names[0], outputs[names[0]]) + "\n}"
        members = ",\n".join(f"        {json.dumps(name)}: {_whole(name, outputs[name])}" for name in names)
        return '{\n    "outputs": {\n' + members + "\n    }\n}"
    batch = -1
    for name in names:
        if outputs[name].ndim == 0:
            raise invalid(ERR_NO_SHAPE.format(name=name))
        if batch >= 0 and len(outputs[name]) != batch:
            raise invalid(ERR_BATCH.format(name=name, size=len(outputs[name]), expected=batch))
        batch = len(outputs[name])
    columns = [_single_line(_strings(name, outputs[name])) for name in names]
    if len(names) == 1:
        rows = columns[0]
    else:
        keys = [f"            {json.dumps(name)}: " for name in names]
        rows = ["{\n" + ",\n".join(key + value for key, value in zip(keys, row)) + "\n        }"
                for row in zip(*columns)]
    return '{\n    "predictions": [' + ", ".join(rows) + "]\n}"


def status_body(states: Iterable[Tuple[int, str, str, str]]) -> dict:
    """GetModelStatusResponse: (version, state, error_code, error_message) per version, newest first."""
    return {"model_version_status": [
        {"version": str(version), "state": state, "status": {"error_code": code, "error_message": message}}
        for version, state, code, message in sorted(states, key=lambda s: -s[0])]}


def metadata_body(name: str, version: int, signature_defs: dict) -> dict:
    """GetModelMetadataResponse: the model spec of the version asked for, and its signatures (SignatureDefMap,
    with proto field names, as Serving prints them)."""
    return {"model_spec": {"name": name, "signature_name": "", "version": str(version)},
            "metadata": {"signature_def": {"signature_def": signature_defs}}}
