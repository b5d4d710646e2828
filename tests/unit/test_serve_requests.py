"""serve's request parsing (no TensorFlow, no server): Serving's row and columnar forms, b64, and each 400 with
TF Serving's own error text (tensorflow/serving util/json_tensor.cc)."""

import base64
import json
import re

import numpy as np
import pytest

from estimator_mnist.tf_model.serve import json_values as jv
from estimator_mnist.tf_model.serve import request_json as rj
from estimator_mnist.tf_model.serve.response_json import metadata_body, predict_body, status_body
from estimator_mnist.tf_model.serve.serving_errors import ServingError
from tests.helpers import error_pattern

SIGNATURES = {"serving_default": {"image_bytes": "DT_STRING"}, "images": {"images": "DT_FLOAT"},
              "pair": {"a": "DT_FLOAT", "b": "DT_INT32"}}
PNG = b"\x89PNG\r\n\x1a\n fake"
B64 = base64.b64encode(PNG).decode()


def types_of(name):
    if (name or "serving_default") not in SIGNATURES:
        raise ServingError("INVALID_ARGUMENT", f'Serving signature name: "{name}" not found in signature def')
    return SIGNATURES[name or "serving_default"]


def parse(document):
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return rj.parse_predict(body, types_of)


def test_row_form_with_b64_images():
    request = parse({"instances": [{"b64": B64}, {"b64": B64}]})
    assert request.row_format and request.signature_name == "" and request.batch_size == 2
    assert list(request.inputs["image_bytes"]) == [PNG, PNG]


def test_row_form_with_named_inputs_and_float_images():
    digit = np.arange(784, dtype=np.float32).reshape(28, 28, 1) / 784
    request = parse({"signature_name": "images", "instances": [{"images": digit.tolist()}] * 3})
    assert request.inputs["images"].shape == (3, 28, 28, 1) and request.inputs["images"].dtype == np.float32
    np.testing.assert_array_equal(request.inputs["images"][2], digit)


def test_columnar_form_plain_and_named():
    plain = parse({"inputs": [{"b64": B64}]})
    assert not plain.row_format and list(plain.inputs["image_bytes"]) == [PNG]
    named = parse({"signature_name": "pair", "inputs": {"a": [[1.5, 2]], "b": [7, 8, 9]}})
    assert named.inputs["a"].shape == (1, 2) and named.inputs["b"].dtype == np.int32
    assert parse({"inputs": {"b64": B64}}).inputs["image_bytes"].shape == ()  # one b64 object: a scalar


def test_b64_without_padding_and_anything_after_the_document_is_accepted():
    assert list(parse({"instances": [{"b64": B64.rstrip("=")}]}).inputs["image_bytes"]) == [PNG]
    assert parse(json.dumps({"instances": [{"b64": B64}]}).encode() + b" trailing").batch_size == 1


BAD_REQUESTS = [
    (b"", jv.ERR_EMPTY),
    (b"{\"instances\": [", jv.ERR_PARSE),
    (b"{\"instances\" [1]}", jv.ERR_PARSE),
    (b"\xff\xfe", jv.ERR_PARSE),
    ([1, 2], rj.ERR_NOT_OBJECT),
    ({"signature_name": 3, "instances": [1]}, rj.ERR_SIGNATURE_NAME),
    ({"instances": [1], "inputs": [1]}, rj.ERR_BOTH_KEYS),
    ({"instances": {"b64": B64}}, rj.ERR_INSTANCES_LIST),
    ({"instances": []}, rj.ERR_INSTANCES_EMPTY),
    ({"examples": []}, rj.ERR_NO_INPUTS),
    ({"instances": [{"b64": "not base64!"}]}, rj.ERR_ELEMENT),
    ({"instances": [{"b64": B64, "x": 1}]}, rj.ERR_ELEMENT_KEY),
    ({"instances": [3]}, rj.ERR_ELEMENT),
    ({"signature_name": "images", "instances": [[[0.5]], [[0.5, 0.5]]]}, rj.ERR_ELEMENT),
    ({"signature_name": "images", "instances": [[[0.5], [0.5]], [[0.5, 0.5]]]}, rj.ERR_ELEMENT),
    ({"signature_name": "images", "instances": [[["a"]]]}, rj.ERR_ELEMENT),
    ({"signature_name": "images", "instances": [[[0.5], 0.5]]}, rj.ERR_ELEMENT),
    ({"signature_name": "images", "inputs": [[1, [2]]]}, jv.ERR_LIST_LEVEL),
    ({"signature_name": "images", "inputs": [[1, 2], [3]]}, jv.ERR_LIST_SIZE),
    ({"signature_name": "images", "inputs": [[True]]}, jv.ERR_TYPE),
    ({"signature_name": "pair", "instances": [1.0]}, rj.ERR_PLAIN_INSTANCES),
    ({"signature_name": "pair", "inputs": [1.0]}, rj.ERR_PLAIN_INPUTS),
    ({"signature_name": "pair", "inputs": {"a": [1.0]}}, rj.ERR_MISSING_INPUT),
    ({"signature_name": "pair", "instances": [{"a": 1.0, "b": 1}, [1.0]]}, rj.ERR_EXPECTING_OBJECT),
    ({"signature_name": "pair", "instances": [{"a": 1.0}]}, rj.ERR_ELEMENT_KEYS),
    ({"signature_name": "pair", "instances": [{"a": 1.0, "b": 2.5}]}, rj.ERR_ELEMENT_KEY),
    ({"signature_name": "pair", "instances": [{"a": 1.0, "b": 2 ** 40}]}, rj.ERR_ELEMENT_KEY),
    ({"signature_name": "nope", "instances": [1]}, 'Serving signature name: "{name}" not found in signature def'),
]


@pytest.mark.parametrize("body,error", BAD_REQUESTS, ids=[f"{i}" for i in range(len(BAD_REQUESTS))])
def test_each_bad_request_is_a_400_with_serving_s_text(body, error):
    with pytest.raises(ServingError) as caught:
        parse(body)
    assert caught.value.http_status == 400
    assert re.fullmatch(error_pattern(error), caught.value.message, re.DOTALL), caught.value.message


def test_texts_match_serving_s_to_the_letter():
    def message(document):
        with pytest.raises(ServingError) as caught:
            parse(document)
        return caught.value.message

    assert message(b"{\"a\": 1,}") == "JSON Parse error: Missing a name for object member. at offset: 8"
    assert message({"instances": [1], "inputs": [1]}) == ('JSON Value: {\n    "instances": [1],\n    "inputs": [1]\n}'
                                                          " Not formatted correctly expecting only one of 'inputs' "
                                                          "or 'instances' keys to exist ")
    assert message({"signature_name": "images", "instances": ["x"]}) == (
        "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: JSON Value: \"x\" Type: String "
        "is not of expected type: float")
    # {"b64": 5} is no b64 object (its value is no string), so Serving takes it for named inputs.
    assert message({"instances": [{"b64": 5}]}) == ("Failed to process element: 0 key: b64 of 'instances' list. "
                                                    "Error: INVALID_ARGUMENT: JSON object: does not have named "
                                                    "input: b64")
    assert message({"inputs": [{"b64": 5}]}) == 'JSON Value: {\n    "b64": 5\n} not formatted correctly for base64 data'

    assert message({"signature_name": "images", "instances": [[[0.5]], [[0.5, 0.5]]]}) == (
        "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: Expecting tensor size: 1 but "
        "got: 2")


def test_debug_strings_are_cut_after_256_bytes():
    text = jv.debug_string({"instances": [0.25] * 500})
    assert text.startswith('{\n    "instances": [0.25, 0.25') and 256 <= len(text) < 270


def test_classify_and_regress_bodies_are_checked_as_serving_checks_them():
    assert rj.parse_examples(json.dumps({"signature_name": "images", "examples": [{"x": 1}]}).encode()) == "images"
    for document, error in [({"instances": [1]}, rj.ERR_NO_EXAMPLES), ({"examples": {}}, rj.ERR_EXAMPLES_LIST),
                            ({"examples": []}, rj.ERR_EXAMPLES_EMPTY), ({"examples": [1]}, rj.ERR_EXAMPLE_OBJECT)]:
        with pytest.raises(ServingError) as caught:
            rj.parse_examples(json.dumps(document).encode())
        assert re.fullmatch(error_pattern(error), caught.value.message, re.DOTALL), caught.value.message


def test_predict_bodies_in_both_forms():
    outputs = {"class_ids": np.array([3, 7], np.int32), "probabilities": np.array([[0.1, 0.9], [0.7, 0.3]], np.float32)}
    rows = json.loads(predict_body(outputs, row_format=True))
    assert rows == {"predictions": [{"class_ids": 3, "probabilities": [0.1, 0.9]},
                                    {"class_ids": 7, "probabilities": [0.7, 0.3]}]}  # float32 in its shortest form
    columns = json.loads(predict_body(outputs, row_format=False))
    assert columns == {"outputs": {"class_ids": [3, 7], "probabilities": [[0.1, 0.9], [0.7, 0.3]]}}
    assert json.loads(predict_body({"only": np.array([1.5], np.float32)}, True)) == {"predictions": [1.5]}
    assert json.loads(predict_body({"x_bytes": np.array([b"\x00"], object)}, False)) == {"outputs": [{"b64": "AA=="}]}


def test_status_and_metadata_bodies_have_serving_s_fields():
    assert status_body([(1, "END", "OK", ""), (2, "AVAILABLE", "OK", "")]) == {"model_version_status": [
        {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
        {"version": "1", "state": "END", "status": {"error_code": "OK", "error_message": ""}}]}
    assert metadata_body("mnist", 5, {"s": {}}) == {
        "model_spec": {"name": "mnist", "signature_name": "", "version": "5"},
        "metadata": {"signature_def": {"signature_def": {"s": {}}}}}
