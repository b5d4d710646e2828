"""serve's REST API through the real waitress server on a loopback socket: a body of exactly --max-body-bytes is
read and one byte more refused; 100 MiB sent without `Expect` gets a 4xx before much more than the limit is read;
fuzzed bodies get 200 or Serving's error (504 is a failure: a REST request asks for no deadline). And the metrics'
labels stay bounded whatever names clients send, over REST and gRPC."""

import json
import socket
import threading
import uuid

import pytest
import requests
from hypothesis import given
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import get_model_status_pb2

from estimator_mnist.tf_model.serve.serving_api import OTHER
from tests.serve_grpc import code_of, GrpcClient
from tests.unit.serve_fakes import live_http, PNG, Serve
from tests.unit.test_serve_fuzz import bodies, FUZZ, raw

LIMIT = 4096
BUFFER = 8 << 20  # what the kernel's socket buffers and waitress' reads may hold beyond the limit
PNG_INSTANCE = b'{"instances": [{"b64": "iVBORw0KGgoB"}]}'


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    serve = Serve(tmp_path_factory.mktemp("real_http") / "model", deadline_secs=5.0, max_body_bytes=LIMIT)
    serve.export(100)
    with live_http(serve, LIMIT) as (http, url, port, _):
        yield serve, url, port
    serve.close()


def _padded(size: int) -> bytes:
    """A valid predict body of exactly `size` bytes (JSON allows whitespace)."""
    return PNG_INSTANCE + b" " * (size - len(PNG_INSTANCE))


def test_a_body_of_the_limit_is_read_and_one_byte_more_is_refused(live):
    _, url, _ = live
    exact = requests.post(url + "/v1/models/mnist:predict", data=_padded(LIMIT), timeout=30)
    assert exact.status_code == 200 and exact.json()["predictions"][0]["class_ids"] == 1
    over = requests.post(url + "/v1/models/mnist:predict", data=_padded(LIMIT + 1), timeout=30)
    assert over.status_code == 400 and over.json()["error"].startswith(f"Request body is larger than {LIMIT} bytes")


def test_100_mib_without_expect_gets_a_4xx_before_more_than_the_limit_and_a_buffer_is_sent(live):
    _, _, port = live
    size, sent, answer = 100 << 20, [0], []
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(f"POST /v1/models/mnist:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())

    def send():
        block = b"0" * 65536
        try:
            while sent[0] < size and not answer:
                sent[0] += client.send(block)
        except OSError:  # the server closed the connection: the end we want
            pass

    sender = threading.Thread(target=send)
    sender.start()
    client.settimeout(30)
    first = client.recv(65536)
    answer.append(sent[0])
    sender.join(30)
    client.close()
    assert first.startswith(b"HTTP/1.1 400 Bad Request"), first[:200]
    assert answer[0] < LIMIT + BUFFER, f"{answer[0]} bytes sent before the answer"


def _rest_answer_is_serving_s(url: str, data: bytes) -> None:
    answer = requests.post(url + "/v1/models/mnist:predict", data=data, timeout=30)
    assert answer.status_code in {200, 400, 404, 501}, (data[:200], answer.status_code, answer.text[:300])
    if answer.status_code != 200:
        assert list(answer.json()) == ["error"], answer.text[:300]


@FUZZ
@given(body=bodies)
def test_fuzzed_bodies_through_waitress_get_200_or_serving_s_error(live, body):
    _rest_answer_is_serving_s(live[1], json.dumps(body, allow_nan=True).encode())


@FUZZ
@given(data=raw)
def test_fuzzed_bytes_through_waitress_get_200_or_serving_s_error(live, data):
    _rest_answer_is_serving_s(live[1], data)


def test_names_clients_send_never_become_metric_labels(live):
    serve, url, _ = live
    client = GrpcClient(serve.grpc_port)

    def page() -> str:
        return requests.get(url + "/monitoring/prometheus/metrics", timeout=30).text

    client.classes_of_pngs([PNG + b"\x02"])
    requests.post(url + "/v1/models/mnist:predict", data=PNG_INSTANCE, timeout=30)
    before = page()
    names = [uuid.uuid4().hex for _ in range(200)]
    for name in names:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name, request.model_spec.signature_name = name, name
        assert code_of(client.models.GetModelStatus, request, timeout=30)[0].name == "NOT_FOUND"
        requests.get(f"{url}/v1/models/{name}", timeout=30)
        requests.post(url + "/v1/models/mnist:predict", timeout=30,
                      data=json.dumps({"signature_name": name, "instances": [1]}))
    after = page()
    assert not any(name in after for name in names)
    labels = {(s.labels.get("model_name"), s.labels.get("signature_name"))
              for family in text_string_to_metric_families(after) for s in family.samples}
    assert {label for pair in labels for label in pair if label} <= {"mnist", "serving_default", "images", OTHER}
    assert len(after) - len(before) < 4096  # a few new series (NOT_FOUND, INVALID_ARGUMENT), not one per name
    client.close()
