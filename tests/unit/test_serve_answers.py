"""serve's answers written without per-value Python: a PredictResponse's bytes from numpy, byte for byte what
protobuf's own encoder writes for the message tensor_protos.fill() builds (fuzzed), and REST bodies in Serving's
layout (rapidjson's PrettyWriter with single-line arrays) that read back as the outputs' values."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tensorflow_serving.apis import predict_pb2

from estimator_mnist.tf_model.serve import response_wire
from estimator_mnist.tf_model.serve.response_json import predict_body
from estimator_mnist.tf_model.serve.tensor_protos import fill, from_array

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int16, np.int8, np.uint8, np.uint16, np.uint32, np.uint64,
          np.bool_]


def protobuf_bytes(name: str, signature: str, version: int, outputs: dict) -> bytes:
    """What protobuf's encoder writes: serve's former answer, the message filled value by value."""
    response = predict_pb2.PredictResponse()
    response.model_spec.name, response.model_spec.signature_name = name, signature
    response.model_spec.version.value = version
    for key, array in outputs.items():
        fill(response.outputs[key], array)
    return response.SerializeToString()


def arrays(dtype):
    # NaN is left out: protobuf widens a float32 to a double and back, which may change a NaN's payload bits.
    elements = st.floats(width=32 if dtype == np.float32 else 64, allow_nan=False) if np.dtype(dtype).kind == "f" \
        else None
    return hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5), elements=elements)


OUTPUTS = st.dictionaries(st.text(min_size=1, max_size=8), st.sampled_from(DTYPES).flatmap(arrays), max_size=4)


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=8), signature=st.text(max_size=8), version=st.integers(0, 2 ** 63 - 1),
       outputs=OUTPUTS)
def test_a_predict_answer_is_byte_for_byte_protobuf_s_own(name, signature, version, outputs):
    assert response_wire.predict_response_bytes(name, signature, version, outputs) == \
        protobuf_bytes(name, signature, version, outputs)


@given(values=hnp.arrays(st.sampled_from([np.int64, np.int32, np.uint64]), hnp.array_shapes(max_dims=1, max_side=50)))
def test_varints_of_any_integer_are_protobuf_s(values):
    assert response_wire.tensor_bytes(values) == from_array(values).SerializeToString()


def test_the_model_s_answer_of_10000_images_and_strings_are_protobuf_s():
    rng = np.random.default_rng(0)
    outputs = {"class_ids": rng.integers(0, 10, 10000).astype(np.int32),
               "logits": rng.normal(size=(10000, 10)).astype(np.float32),
               "probabilities": rng.random((10000, 10)).astype(np.float32),
               "names": np.array([b"a", b"\xff", b""], dtype=object)}
    assert response_wire.predict_response_bytes("mnist", "images", 1700000000, outputs) == \
        protobuf_bytes("mnist", "images", 1700000000, outputs)


def former_values(array: np.ndarray):
    """The values serve wrote before, one Python float per value: the float32's shortest form."""
    if array.dtype == np.float32:
        return np.array([float(repr(value)) for value in array.ravel()]).reshape(array.shape).tolist()
    return array.tolist()


@settings(max_examples=200, deadline=None)
@given(outputs=st.dictionaries(st.sampled_from(["class_ids", "logits", "p"]),
                               hnp.arrays(st.sampled_from([np.float32, np.int32, np.int64, np.float64]),
                                          st.just((3, 2))), min_size=1),
       row_format=st.booleans())
def test_rest_bodies_read_back_as_the_outputs_values(outputs, row_format):
    body = json.loads(predict_body(outputs, row_format))
    names = sorted(outputs)
    columns = {name: former_values(outputs[name]) for name in names}
    if not row_format:
        expected = columns if len(names) > 1 else columns[names[0]]
        assert _same(body, {"outputs": expected})
    else:
        rows = [{name: columns[name][i] for name in names} if len(names) > 1 else columns[names[0]][i]
                for i in range(3)]
        assert _same(body, {"predictions": rows})


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_rest_bodies_are_in_serving_s_layout():
    outputs = {"class_ids": np.array([3, 1], np.int32),
               "probabilities": np.array([[0.1, 0.9], [np.nan, np.inf]], np.float32)}
    assert predict_body(outputs, True) == (
        '{\n    "predictions": [{\n            "class_ids": 3,\n            "probabilities": [0.1, 0.9]\n'
        '        }, {\n            "class_ids": 1,\n            "probabilities": [NaN, Infinity]\n        }]\n}')
    assert predict_body(outputs, False) == (
        '{\n    "outputs": {\n        "class_ids": [3, 1],\n        "probabilities": [[0.1, 0.9], [NaN, Infinity]]'
        '\n    }\n}')
    assert predict_body({"y": np.zeros((2, 0), np.float32)}, True) == '{\n    "predictions": [[], []]\n}'


@pytest.mark.parametrize("value,text", [(np.float32(0.1), "0.1"), (np.float32(1e-5), "1e-05"),
                                        (np.float32(-np.inf), "-Infinity"), (np.float32(16777216), "16777216.0")])
def test_a_float32_is_written_in_its_shortest_form(value, text):
    assert predict_body({"y": np.array([value])}, True) == '{\n    "predictions": [' + text + ']\n}'
