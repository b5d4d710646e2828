"""serve's bounds and drain in-process: numbers read as rapidjson reads them, TensorProtos as FromProto reads
them, waitress on a loopback socket refusing an oversized body with Serving's error before reading it, the
drain's readiness, refusals and closed keep-alive connections, CORS as Serving's flag adds it."""

import json
import socket
import time

import numpy as np
import pytest
import requests
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from estimator_mnist.tf_model.serve import json_values, tensor_protos
from estimator_mnist.tf_model.serve.app import CORS_HEADERS
from estimator_mnist.tf_model.serve.lifecycle import ERR_STOPPING
from estimator_mnist.tf_model.serve.serving_errors import ServingError
from tests.unit.serve_fakes import live_http, Serve


@pytest.mark.parametrize("body,message", [
    (b'{"instances": [1e400]}', "JSON Parse error: Number too big to be stored in double. at offset: 15"),
    (b'{"a": "1e999", "b": [2, -' + b"9" * 400 + b"]}", "Number too big to be stored in double. at offset: 24"),
    (b'{"inputs": [' + b"9" * 5000 + b"]}", "Number too big to be stored in double. at offset: 12"),
    (b"[" * 70 + b"]" * 70, "JSON Value nested deeper than 64 levels"),
    (b"[" * 100000, "JSON Value nested deeper than 64 levels"),
])
def test_numbers_and_nesting_rapidjson_cannot_store_are_refused(body, message):
    with pytest.raises(ServingError, match=message.replace("[", r"\[").replace(".", r"\.")) as raised:
        json_values.parse_document(body)
    assert raised.value.code == "INVALID_ARGUMENT"


def test_numbers_a_double_holds_are_read_as_serving_reads_them():
    document = json_values.parse_document(b'[1e40, 18446744073709551615, 18446744073709551616, -9223372036854775809]')
    assert document == [1e40, 2 ** 64 - 1, float(2 ** 64), float(-(2 ** 63) - 1)]
    assert isinstance(document[2], float) and isinstance(document[1], int)
    assert json_values.to_array([1e40, -1e40], "DT_FLOAT").tolist() == [np.inf, -np.inf]  # GetFloat()
    with pytest.raises(ServingError, match="is not of expected type: int64"):
        json_values.to_array([document[2]], "DT_INT64")


def proto(dtype, dims, **fields):
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims])
    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape, **fields)


def test_tensor_protos_are_read_as_from_proto_reads_them():
    to_array, FLOAT = tensor_protos.to_array, types_pb2.DT_FLOAT
    assert to_array(proto(FLOAT, [2, 3], float_val=[1, 2]), "x", FLOAT, 0).tolist() == [[1, 2, 2], [2, 2, 2]]
    assert to_array(proto(FLOAT, [2], float_val=[1, 2, 3]), "x", FLOAT, 0).tolist() == [1, 2]
    assert to_array(proto(FLOAT, [2]), "x", FLOAT, 0).tolist() == [0, 0]
    content = np.array([1.5, -2], np.float32).tobytes()
    assert to_array(proto(FLOAT, [2], tensor_content=content), "x", FLOAT, 0).tolist() == [1.5, -2]
    strings = proto(types_pb2.DT_STRING, [2], tensor_content=b"\x01\x02ab!")
    assert to_array(strings, "s", types_pb2.DT_STRING, 0).tolist() == [b"a", b"b!"]
    for bad in (proto(FLOAT, [3], tensor_content=content), proto(FLOAT, [-1]), proto(0, [1]),
                proto(types_pb2.DT_STRING, [2], tensor_content=b"\x05ab")):
        with pytest.raises(ServingError, match="^tensor parsing error: x$"):
            to_array(bad, "x", bad.dtype or FLOAT, 0)
    with pytest.raises(ServingError, match="larger than estimator-mnist serve's limit"):
        to_array(proto(FLOAT, [2 ** 40, 2 ** 20], float_val=[1]), "x", FLOAT, 0)
    with pytest.raises(ServingError, match=r"^Expects arg\[0\] to be float but half is provided$"):
        to_array(proto(types_pb2.DT_HALF, [1], half_val=[1]), "x", FLOAT, 0)
    back = tensor_protos.from_array(np.array([[1, 2]], np.int32))
    assert back.dtype == types_pb2.DT_INT32 and list(back.int_val) == [1, 2] and [d.size for d in back.tensor_shape.dim] == [1, 2]


@pytest.fixture
def live(tmp_path):
    """The app under waitress on a loopback socket, driven by a thread as server.py drives it."""
    serve = Serve(tmp_path / "model", max_body_bytes=1000, cors=True)
    serve.export(100)
    with live_http(serve, 1000, cors=True) as (http, url, port, on_loop):
        yield serve, http, url, port, on_loop
    serve.close()


def test_an_oversized_body_is_refused_with_serving_s_error_before_it_is_read(live):
    _, _, _, port, _ = live
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"POST /v1/models/mnist:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n"
                       b"Expect: 100-continue\r\n\r\n")
        # Until the server closes the connection: its head and its body may come in two reads.
        client.settimeout(10)
        answer = b"".join(iter(lambda: client.recv(65536), b"")).decode()
    head, body = answer.split("\r\n\r\n", 1)
    assert head.startswith("HTTP/1.1 400 Bad Request") and "100 Continue" not in head
    assert "Connection: close" in head and "application/json" in head
    assert json.loads(body)["error"].startswith("Request body is larger than 1000 bytes, the limit of estimator-mnist")


def test_cors_headers_as_serving_s_flag_adds_them(live):
    _, _, base, _, _ = live
    preflight = requests.options(base + "/v1/models/mnist:predict", headers={"Origin": "http://page.test"}, timeout=5)
    status = requests.get(base + "/v1/models/mnist", timeout=5)
    for answer in (preflight, status):
        assert answer.status_code == 200 and CORS_HEADERS.items() <= answer.headers.items()


def test_the_drain_turns_readiness_off_then_refuses_and_closes_keep_alive_connections(live):
    serve, http, base, port, on_loop = live
    session = requests.Session()
    assert session.get(base + "/estimator-mnist/ready", timeout=5).json() == {"ready": True, "draining": False}
    serve.api.lifecycle.begin_drain()
    assert session.get(base + "/estimator-mnist/ready", timeout=5).status_code == 503
    answered = session.post(base + "/v1/models/mnist:predict", json={"instances": [{"b64": "iVBORw0KGgoH"}]},
                            timeout=5)
    assert answered.status_code == 200 and "Connection" not in answered.headers  # still answered, kept alive
    assert session.get(base + "/v1/models/mnist", timeout=5).json()["model_version_status"][0]["state"] == "UNLOADING"
    serve.api.lifecycle.refuse()
    on_loop(http.stop_accepting)  # as server.py: on the thread that polls
    refused = session.post(base + "/v1/models/mnist:predict", json={"instances": [{"b64": "iVBORw0KGgoH"}]},
                           timeout=5)
    assert (refused.status_code, refused.json()) == (503, {"error": ERR_STOPPING})
    assert refused.headers["Connection"] == "close"
    with pytest.raises(requests.ConnectionError):
        session.get(base + "/v1/models/mnist", timeout=5)  # a new connection: refused by the kernel
    deadline = time.monotonic() + 5
    while not http.idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert http.idle() and serve.api.lifecycle.in_flight == 0
