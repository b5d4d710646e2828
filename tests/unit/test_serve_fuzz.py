"""serve's request parsers fuzzed (Hypothesis), against the app in-process with a stand-in export: REST bodies
(row and columnar forms, b64 objects, nested lists, huge and tiny numbers, deep nesting, wrong types, bytes that
are no JSON) and gRPC TensorProtos (every dtype, shapes valid and not, contents of every size). Each gets 200 or
a status Serving gives (4xx, 501; 504 only over gRPC, whose requests ask for a deadline; REST with `{"error":
...}`), never 500 or INTERNAL, and the server keeps serving (test_serve_real_http.py fuzzes REST through waitress
as well). Deterministic settings (derandomize, no database): CI runs the same examples every time."""

import json

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from tests.serve_grpc import code_of, GrpcClient
from tests.unit.serve_fakes import PNG, Serve

FUZZ = settings(max_examples=150, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
REST_STATUSES = {200, 400, 404, 501}  # no 504: a REST request asks for no deadline
GRPC_CODES = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
              grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.DEADLINE_EXCEEDED}
PNG_B64 = {"b64": "iVBORw0KGgoH"}

numbers = (st.integers(-(2 ** 70), 2 ** 70) | st.integers(-(10 ** 400), 10 ** 400) | st.floats()
           | st.sampled_from([1e40, -1e40, 1e-320, 2 ** 63, 2 ** 64, -(2 ** 63) - 1, 10 ** 308, 0.5]))
scalars = st.none() | st.booleans() | numbers | st.text(max_size=8) | st.just(PNG_B64) | \
    st.builds(lambda text: {"b64": text}, st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(["b64", "images", "image_bytes", "x"]), inner, max_size=2),
                      max_leaves=12)
images = st.builds(lambda n, v: [[[[v]] * 28] * 28] * n, st.integers(1, 2), numbers)
bodies = st.fixed_dictionaries({}, optional={
    "signature_name": st.sampled_from(["", "images", "serving_default", "nope"]) | scalars,
    "instances": values | images | st.lists(st.just(PNG_B64) | values, max_size=3),
    "inputs": values | images | st.dictionaries(st.sampled_from(["images", "image_bytes"]), values | images),
})
raw = (st.binary(max_size=64) | st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n)
       | st.integers(300, 6000).map(lambda n: b'{"inputs": [' + b"9" * n + b"]}")
       | st.sampled_from([b'{"instances": [1e400]}', b'{"inputs": -1e999}', b"NaN", b'{"instances": [Infinity]}',
                          b'{"signature_name": "images", "inputs": [[[[NaN]]]]}']))


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    serve = Serve(tmp_path_factory.mktemp("fuzz") / "model", deadline_secs=5.0, max_body_bytes=1 << 16)
    serve.export(100)
    client = GrpcClient(serve.grpc_port)
    yield serve, client
    client.close()
    serve.close()


def rest_answer_is_serving_s(serve, data: bytes, verb: str = "predict") -> None:
    answer = serve.http.post(f"/v1/models/mnist:{verb}", data=data)
    assert answer.status_code in REST_STATUSES, (data[:200], answer.status_code, answer.data[:300])
    if answer.status_code != 200:
        assert list(json.loads(answer.data)) == ["error"], answer.data[:300]


@FUZZ
@given(body=bodies, verb=st.sampled_from(["predict", "predict", "classify", "regress"]))
def test_fuzzed_rest_bodies_get_200_or_serving_s_error(serve, body, verb):
    rest_answer_is_serving_s(serve[0], json.dumps(body, allow_nan=True).encode(), verb)


@FUZZ
@given(data=raw)
def test_fuzzed_rest_bytes_get_200_or_serving_s_error(serve, data):
    rest_answer_is_serving_s(serve[0], data)


dims = st.lists(st.integers(-2, 4) | st.sampled_from([28, 2 ** 40, 2 ** 62]), max_size=5)
dtypes = st.sampled_from(sorted(types_pb2.DataType.values())) | st.integers(-3, 400)
protos = st.builds(
    lambda dtype, shape, unknown, content, floats, ints, strings: tensor_pb2.TensorProto(
        dtype=dtype, tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in shape], unknown_rank=unknown),
        tensor_content=content, float_val=floats, int_val=ints, string_val=strings),
    dtypes, dims, st.booleans() | st.just(False), st.binary(max_size=40) | st.just(b""),
    st.lists(st.floats(width=32), max_size=6), st.lists(st.integers(-(2 ** 31), 2 ** 31 - 1), max_size=6),
    st.lists(st.binary(max_size=8) | st.just(PNG + b"\x01"), max_size=4))


@FUZZ
@given(proto=protos, alias=st.sampled_from(["image_bytes", "images", "x"]),
       signature=st.sampled_from(["", "images", "nope"]))
def test_fuzzed_tensor_protos_get_ok_or_serving_s_status(serve, proto, alias, signature):
    _, client = serve
    request = client.predict_request({}, signature)
    request.inputs[alias].CopyFrom(proto)
    code, details = code_of(client.predictions.Predict, request, timeout=30)
    assert code in GRPC_CODES, (proto, code, details)


def test_after_the_fuzzing_it_still_serves(serve):
    serve_, client = serve
    assert client.classes_of_pngs([PNG + b"\x04"]) == [4]
    answer = serve_.http.post("/v1/models/mnist:predict", json={"instances": [PNG_B64]})
    assert answer.status_code == 200 and answer.json == {"predictions": [{
        "class_ids": 7, "logits": [0.0] * 7 + [3.0] + [0.0] * 2, "probabilities": [0.0] * 7 + [1.0] + [0.0] * 2}]}
