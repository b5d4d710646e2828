"""Request bodies of Serving's REST API into named input arrays: `:predict` in row and columnar form, and the
`examples` of `:classify` and `:regress`.

Ported from tensorflow/serving's util/json_tensor.cc
(FillPredictRequestFromJson, FillTensorMapFromInstancesList,
FillTensorMapFromInputsMap, FillClassifyRegressRequestFromJson), with its
error texts, so that a client sees what TF Serving would answer. No
TensorFlow: the signature's inputs come in as {name: "DT_FLOAT", ...}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict

import numpy as np

from estimator_mnist.tf_model.serve.json_values import debug_string, is_b64_object, kind, parse_document, to_array
from estimator_mnist.tf_model.serve.serving_errors import invalid, ServingError

DEFAULT_SIGNATURE = "serving_default"  # kDefaultServingSignatureDefKey
ERR_NOT_OBJECT = "JSON Value: {value} Is not object"
ERR_SIGNATURE_NAME = ("JSON Value: {value} not formatted correctly. 'signature_name' key must be a string "
                      "value.")
ERR_BOTH_KEYS = ("JSON Value: {value} Not formatted correctly expecting only one of 'inputs' or 'instances' keys "
                 "to exist ")
ERR_INSTANCES_LIST = "JSON Value: {value} Expecting 'instances' to be an list/array"
ERR_INSTANCES_EMPTY = "JSON Value: {value} No values in 'instances' array"
ERR_NO_INPUTS = "Missing 'inputs' or 'instances' key"
ERR_NO_INPUT_MAP = "Failed to get input map for signature: {signature}"
ERR_PLAIN_INSTANCES = ("instances is a plain list, but expecting list of objects as multiple input tensors "
                       "required as per tensorinfo_map")
ERR_PLAIN_INPUTS = ("inputs is a plain value/list, but expecting an object as multiple input tensors required as "
                    "per tensorinfo_map")
ERR_EXPECTING_OBJECT = "Expecting object but got list at item {item} of input list"
ERR_EXPECTING_VALUE = "Expecting value/list but got object at item {item} of input list"
ERR_NAMED_INPUT = "JSON object: does not have named input: {name}"
ERR_ELEMENT = "Failed to process element: {item} of 'instances' list. Error: {error}"
ERR_ELEMENT_KEY = "Failed to process element: {item} key: {name} of 'instances' list. Error: {error}"
ERR_ELEMENT_KEYS = ("Failed to process element: {item} of 'instances' list. JSON object: {value} keys must be "
                    "equal to: {names}")
ERR_SIZE = "Expecting tensor size: {expected} but got: {size}"
ERR_SHAPE = "Expecting shape {expected} but got: {shape}"
ERR_MISSING_INPUT = "Missing named input: {name} in 'inputs' object."
ERR_NO_EXAMPLES = "JSON Value: {value} When method is classify, key 'examples' is expected and was not found"
ERR_EXAMPLES_LIST = "JSON Value: {value} Expecting 'examples' value to be an list/array"
ERR_EXAMPLES_EMPTY = "JSON Value: {value} 'examples' value is an empty array"
ERR_EXAMPLE_OBJECT = "Example must be JSON object but got JSON {kind}"


@dataclass(frozen=True)
class PredictRequest:
    signature_name: str  # as given ("" when left out: the default signature)
    inputs: Dict[str, np.ndarray]
    row_format: bool  # "instances" (answered with "predictions") or "inputs" (answered with "outputs")

    @property
    def batch_size(self) -> int:
        return max(len(array) if array.ndim else 1 for array in self.inputs.values())


def _document(body: bytes) -> dict:
    document = parse_document(body)
    if not isinstance(document, dict):
        raise invalid(ERR_NOT_OBJECT.format(value=debug_string(document)))
    return document


def _signature_name(document: dict) -> str:
    name = document.get("signature_name", "")
    if not isinstance(name, str):
        raise invalid(ERR_SIGNATURE_NAME.format(value=debug_string(document)))
    return name


def _shape_text(shape) -> str:
    return "[" + ",".join(str(size) for size in shape) + "]"


def _row_item(value, name: str, input_types: Dict[str, str], seen: dict) -> np.ndarray:
    """AddInstanceItem: one instance's value of one input, whose size and shape every instance must share."""
    if name not in input_types:
        raise invalid(ERR_NAMED_INPUT.format(name=name))
    array = to_array(value, input_types[name])
    if name not in seen:
        seen[name] = array.shape
    elif int(np.prod(seen[name])) != array.size:
        raise invalid(ERR_SIZE.format(expected=int(np.prod(seen[name])), size=array.size))
    elif seen[name] != array.shape:
        raise invalid(ERR_SHAPE.format(expected=_shape_text(seen[name]), shape=_shape_text(array.shape)))
    return array


def _element_is_object(value) -> bool:
    return isinstance(value, dict) and not is_b64_object(value)


def _from_instances(instances: list, input_types: Dict[str, str]) -> Dict[str, np.ndarray]:
    if not isinstance(instances[0], dict) and len(input_types) > 1:
        raise invalid(ERR_PLAIN_INSTANCES)
    objects = _element_is_object(instances[0])
    names = sorted(input_types)
    rows: Dict[str, list] = {name: [] for name in names}
    seen: dict = {}
    for item, element in enumerate(instances):
        if objects != _element_is_object(element):
            raise invalid((ERR_EXPECTING_OBJECT if objects else ERR_EXPECTING_VALUE).format(item=item))
        pairs = element.items() if objects else [(names[0], element)]
        for name, value in pairs:
            try:
                array = _row_item(value, name, input_types, seen)
            except ServingError as exc:
                template = ERR_ELEMENT_KEY if objects else ERR_ELEMENT
                raise invalid(template.format(item=item, name=name, error=exc.status_string())) from None
            rows[name].append(array)
        if objects and set(element) != set(names):
            raise invalid(ERR_ELEMENT_KEYS.format(item=item, value=debug_string(element), names=",".join(names)))
    return {name: np.stack(arrays) for name, arrays in rows.items()}


def _from_inputs(inputs, input_types: Dict[str, str]) -> Dict[str, np.ndarray]:
    if not isinstance(inputs, dict) or is_b64_object(inputs):
        if len(input_types) > 1:
            raise invalid(ERR_PLAIN_INPUTS)
        name = next(iter(input_types))
        return {name: to_array(inputs, input_types[name])}
    arrays = {}
    for name in sorted(input_types):
        if name not in inputs:
            raise invalid(ERR_MISSING_INPUT.format(name=name))
        arrays[name] = to_array(inputs[name], input_types[name])
    return arrays


def parse_predict(body: bytes, input_types_of: Callable[[str], Dict[str, str]]) -> PredictRequest:
    """A `:predict` body. `input_types_of(signature_name)` gives that signature's {input: dtype} of the served
    version, or raises Serving's error (no version: 404; no such signature: 400)."""
    document = _document(body)
    signature_name = _signature_name(document)
    input_types = input_types_of(signature_name)
    if not input_types:
        raise invalid(ERR_NO_INPUT_MAP.format(signature=signature_name or "DEFAULT"))
    if "instances" in document:
        if "inputs" in document:
            raise invalid(ERR_BOTH_KEYS.format(value=debug_string(document)))
        instances = document["instances"]
        if not isinstance(instances, list):
            raise invalid(ERR_INSTANCES_LIST.format(value=debug_string(document)))
        if not instances:
            raise invalid(ERR_INSTANCES_EMPTY.format(value=debug_string(document)))
        return PredictRequest(signature_name, _from_instances(instances, input_types), row_format=True)
    if "inputs" in document:
        return PredictRequest(signature_name, _from_inputs(document["inputs"], input_types), row_format=False)
    raise invalid(ERR_NO_INPUTS)


def parse_examples(body: bytes) -> str:
    """A `:classify` or `:regress` body, checked as Serving checks it before it looks at the signature; returns
    the signature name it asks for."""
    document = _document(body)
    signature_name = _signature_name(document)
    examples = document.get("examples")
    if "examples" not in document:
        raise invalid(ERR_NO_EXAMPLES.format(value=debug_string(document)))
    if not isinstance(examples, list):
        raise invalid(ERR_EXAMPLES_LIST.format(value=debug_string(document)))
    if not examples:
        raise invalid(ERR_EXAMPLES_EMPTY.format(value=debug_string(document)))
    for example in [document.get("context", {})] + examples:
        if not isinstance(example, dict):
            raise invalid(ERR_EXAMPLE_OBJECT.format(kind=kind(example)))
    return signature_name
