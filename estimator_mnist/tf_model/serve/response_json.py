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


def _values(name: str, array: np.ndarray):
    """Nested lists of JSON values for one output (or one row of it)."""
    if array.dtype == np.float32:
        shortest = np.array([float(repr(value)) for value in array.ravel()], dtype=np.float64)
        return shortest.reshape(array.shape).tolist()
    if array.dtype == object or array.dtype.kind == "S":
        def text(value: bytes):
            if name.endswith(BYTES_SUFFIX):
                return {"b64": base64.b64encode(value).decode("ascii")}
            return value.decode("utf-8", errors="replace")
        return np.vectorize(text, otypes=[object])(array).tolist() if array.size else array.tolist()
    return array.tolist()


def predict_body(outputs: Dict[str, np.ndarray], row_format: bool) -> str:
    """MakeRowFormatJsonFromTensors or MakeColumnarFormatJsonFromTensors; one output is written without its name."""
    names = sorted(outputs)
    if not row_format:
        columns = {name: _values(name, outputs[name]) for name in names}
        return json.dumps({"outputs": columns if len(names) > 1 else columns[names[0]]}, indent=4)
    batch = -1
    for name in names:
        if outputs[name].ndim == 0:
            raise invalid(ERR_NO_SHAPE.format(name=name))
        if batch >= 0 and len(outputs[name]) != batch:
            raise invalid(ERR_BATCH.format(name=name, size=len(outputs[name]), expected=batch))
        batch = len(outputs[name])
    columns = {name: _values(name, outputs[name]) for name in names}
    rows = [{name: columns[name][item] for name in names} if len(names) > 1 else columns[names[0]][item]
            for item in range(batch)]
    return json.dumps({"predictions": rows}, indent=4)


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
