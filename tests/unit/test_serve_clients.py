"""serve fair by client and bounded by work, in-process: clients take turns by deficit round robin whatever the
number of their requests, one client's cap refuses it alone, a client with nothing queued gets a small request
into a full queue, a request declaring more images than the limit is refused before anything is made of it
(gRPC and REST, naming the flag), refusals counted by reason with no client in the labels, the client read from
a trusted proxy's X-Forwarded-For only, and REST connections bounded (100 idle ones and a client sending its
head a byte at a time leave room for a new one, which the receive bound then closes), and a request that could
not be answered by its deadline even at the model's best pace refused before its work."""

import asyncio
import socket
import threading
import time

import grpc
import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from estimator_mnist.tf_model.serve.admission import ERR_TOO_LATE
from estimator_mnist.tf_model.serve.batcher import Batcher, ClientFull, give_up, QueueFull, Task, TooLate
from estimator_mnist.tf_model.serve.fair_queue import FairQueue, PACE_MIN_CALLS
from estimator_mnist.tf_model.serve.grpc_api import peer_address
from estimator_mnist.tf_model.serve.grpc_codec import Codec, REQUEST_BYTES, REQUEST_IMAGES
from estimator_mnist.tf_model.serve.serving_api import ERR_TASK_SIZE
from tests.serve_grpc import GrpcClient
from tests.unit.serve_fakes import hold_calls, live_http, Serve
from tests.unit.test_serve_fairness import images, Version


def test_a_client_with_one_request_gets_half_the_calls_beside_one_with_three():
    batcher, version = Batcher(max_batch_size=8, timeout_secs=0), Version()
    version.model.gate.clear()
    finished = []
    for name, client in (("b1", "b"), ("b2", "b"), ("b3", "b"), ("c", "c")):
        future = batcher.submit(version, "s", images(100), client=client)
        future.add_done_callback(lambda _, name=name: finished.append(name))
        if name == "b1":
            assert version.model.first_call.wait(10)
    version.model.gate.set()
    deadline = time.monotonic() + 20
    while len(finished) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    # Round robin by request would give c a quarter of the calls, and end it after b2; by client, half.
    assert finished.index("c") < finished.index("b2"), finished
    batcher.stop(timeout=5)


def test_a_one_image_request_waits_for_at_most_two_calls_beside_a_busy_client():
    batcher, version = Batcher(max_batch_size=8, timeout_secs=0), Version()
    version.model.gate.clear()
    large = [batcher.submit(version, "s", images(400), client="b") for _ in range(3)]
    assert version.model.first_call.wait(10)
    small = batcher.submit(version, "s", images(1, start=5000), client="a")
    version.model.gate.set()
    assert small.result(10)["y"].tolist() == [5000.0]
    assert len(version.model.sizes) <= 3  # the call running, then the one it shared
    assert all(not future.done() for future in large)
    batcher.stop(timeout=5)


def test_a_client_over_its_cap_is_refused_alone_and_a_new_client_gets_into_a_full_queue():
    batcher = Batcher(max_batch_size=4, timeout_secs=0, max_queued_images=10, max_client_images=8)
    version = Version()
    version.model.gate.clear()
    batcher.submit(version, "s", images(8), client="a")
    assert version.model.first_call.wait(10)
    with pytest.raises(ClientFull):
        batcher.submit(version, "s", images(1), client="a")
    batcher.submit(version, "s", images(2), client="b")  # the queue is full now: 10 images
    batcher.submit(version, "s", images(1), client="c")  # nothing of c's queued: into the reserve
    with pytest.raises(QueueFull):
        batcher.submit(version, "s", images(1), client="c")
    with pytest.raises(QueueFull):
        batcher.submit(version, "s", images(5), client="d")  # larger than a call: no reserve for it
    version.model.gate.set()
    batcher.stop(timeout=5)


def test_a_request_given_up_while_its_call_is_gathered_is_counted_out_of_its_client_s_images():
    batcher, version = Batcher(max_batch_size=8, timeout_secs=0.5, max_client_images=4), Version()
    future = batcher.submit(version, "s", images(3), client="b")  # its call waits 0.5 s for others
    time.sleep(0.1)
    give_up(future)  # its deadline passed, say, while its call was being gathered
    time.sleep(0.6)
    assert batcher.queued_images() == 0
    assert batcher.submit(version, "s", images(4), client="b").result(10)["y"].tolist() == [0, 1, 2, 3]
    batcher.stop(timeout=5)


def tiny_but_huge(images_declared: int) -> tensor_pb2.TensorProto:
    """A few bytes whose shape declares many images, filled by its one float_val (FromProto's rule)."""
    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in (images_declared, 28, 28, 1)]
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims),
                                  float_val=[0.5])


def refusals(serve) -> dict:
    page = serve.http.get("/monitoring/prometheus/metrics").get_data(as_text=True)
    assert "127.0.0" not in page  # no client's address is a label
    return {sample.labels["reason"]: sample.value for family in text_string_to_metric_families(page)
            for sample in family.samples if sample.name == "estimator_mnist_serve_refused"}


def test_more_images_than_the_limit_are_refused_over_grpc_and_rest_naming_it(tmp_path):
    serve = Serve(tmp_path / "model")
    serve.export(100)
    client = GrpcClient(serve.grpc_port)
    try:
        request = client.predict_request({}, "images")
        request.inputs["images"].CopyFrom(tiny_but_huge(10001))
        with pytest.raises(grpc.RpcError) as raised:
            client.predictions.Predict(request, timeout=10)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert raised.value.details() == ERR_TASK_SIZE.format(size=10001, limit=10000)
        assert "--max-images-per-request" in raised.value.details()
        request.inputs["images"].CopyFrom(tiny_but_huge(3))
        answer = client.predictions.Predict(request, timeout=10)  # within the limit: the last value repeats
        assert list(answer.outputs["class_ids"].int_val) == [int(0.5 * 784) % 10] * 3
        serve.api.max_images = 2
        body = {"signature_name": "images", "instances": np.zeros((3, 28, 28, 1)).tolist()}
        rest = serve.http.post("/v1/models/mnist:predict", json=body)
        assert (rest.status_code, rest.json) == (400, {"error": ERR_TASK_SIZE.format(size=3, limit=2)})
        assert refusals(serve)["images_per_request"] == 2
    finally:
        client.close()
        serve.close()


def test_one_client_over_its_cap_gets_resource_exhausted_429_and_is_counted(tmp_path):
    serve = Serve(tmp_path / "model")
    serve.export(100)
    serve.batcher.max_client_images = 1
    gate = hold_calls(serve)
    served = serve.versions.acquire()
    held = serve.batcher.submit(served, "images", {"images": np.zeros((1, 28, 28, 1), np.float32)},
                                client="127.0.0.1")  # Flask's test client's address
    served.release()
    body = {"signature_name": "images", "instances": np.zeros((1, 28, 28, 1)).tolist()}
    answer = serve.http.post("/v1/models/mnist:predict", json=body)
    assert answer.status_code == 429 and "--max-client-images" in answer.json["error"]
    assert refusals(serve)["client_queue"] == 1
    gate.set()
    held.result(10)
    assert serve.http.post("/v1/models/mnist:predict", json=body).status_code == 200  # its queue is free again
    serve.close()


@pytest.mark.parametrize("address,forwarded,trusted,client", [
    ("10.0.0.5", "1.2.3.4, 192.168.1.9", ("10.0.0.5",), "192.168.1.9"),  # what the proxy saw: the last entry
    ("10.0.0.6", "1.2.3.4", ("10.0.0.5",), "10.0.0.6"),  # not the proxy: its header is the client's own word
    ("10.0.0.5", "", ("10.0.0.5",), "10.0.0.5"),
])
def test_the_client_is_the_source_address_or_a_trusted_proxy_s_forwarded_for(tmp_path, address, forwarded,
                                                                              trusted, client):
    serve = Serve(tmp_path / "model")
    serve.api.trusted_proxies = frozenset(trusted)
    assert serve.api.client_of(address, forwarded) == client
    serve.close()


@pytest.mark.parametrize("peer,address", [("ipv4:127.0.0.2:51234", "127.0.0.2"), ("ipv6:[::1]:5", "::1"),
                                          ("unix:/tmp/s", "unix:/tmp/s")])
def test_a_grpc_peer_without_its_port(peer, address):
    assert peer_address(peer) == address


def test_100_idle_connections_and_a_byte_a_time_client_leave_room_and_the_slow_one_is_closed(tmp_path):
    serve = Serve(tmp_path / "model")
    serve.export(100)
    with live_http(serve, 1000, receive_secs=1.0) as (_, base, port, _):
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET /v1/models/mnist HTTP/1.1\r\n")
        assert requests.get(base + "/v1/models/mnist", timeout=5).status_code == 200  # a new client
        slow.settimeout(0.5)
        closed_at, started = None, time.monotonic()
        while closed_at is None and time.monotonic() - started < 10:
            try:
                slow.sendall(b"X")  # a byte every half second: waitress' idle timeout alone never fires
                if slow.recv(100) == b"":
                    closed_at = time.monotonic() - started
            except socket.timeout:
                continue
            except OSError:
                closed_at = time.monotonic() - started
        assert closed_at is not None and closed_at < 5  # the receive bound (1 s here), looked at every second
        for sock in idle + [slow]:
            sock.close()
    serve.close()


@pytest.mark.parametrize("images,off_the_loop", [(1, False), (64, False), (65, True), (10000, True)])
def test_a_request_s_inputs_and_answer_go_off_the_loop_by_its_images_whatever_its_bytes(images, off_the_loop):
    codec = Codec()

    async def handled():
        REQUEST_BYTES.set(56)  # a tiny message
        REQUEST_IMAGES.set(images)
        return await codec.offload(threading.get_ident) != threading.get_ident()

    try:
        assert asyncio.run(handled()) == off_the_loop
    finally:
        codec.close()


def test_calls_hold_16_images_while_small_requests_come_and_64_once_none_came_for_a_second():
    batcher, version, now = Batcher(max_batch_size=64, timeout_secs=0), Version(), [100.0]
    batcher.clock = lambda: now[0]
    assert batcher.submit(version, "s", images(200), client="b").result(10)["y"].tolist() == list(range(200))
    assert max(version.model.sizes) == 64  # no small request yet: calls as large as allowed
    assert batcher.submit(version, "s", images(1), client="a").result(10)["y"].tolist() == [0.0]
    del version.model.sizes[:]
    now[0] += 0.9  # a small request came 0.9 s ago: a 1-image request arriving waits for a call of 16, not 64
    assert batcher.submit(version, "s", images(200), client="b").result(10)["y"].tolist() == list(range(200))
    assert max(version.model.sizes) == 16, version.model.sizes
    del version.model.sizes[:]
    now[0] += 0.2  # none for 1.1 s
    assert batcher.submit(version, "s", images(200), client="b").result(10)["y"].tolist() == list(range(200))
    assert max(version.model.sizes) == 64, version.model.sizes
    batcher.stop(timeout=5)


def test_a_request_is_too_late_when_its_client_s_images_ahead_and_its_own_exceed_its_deadline_at_the_best_pace():
    queue = FairQueue(Batcher())
    queue.check("c", 10000, remaining=0.001)  # no pace known yet: nothing refused on a guess
    queue.called(8, 0.5)  # a call of fewer than 16 images says nothing of the pace
    queue.check("c", 10000, remaining=0.001)
    for _ in range(PACE_MIN_CALLS - 1):
        queue.called(64, 0.64)  # 10 ms an image: the first calls of each size, TensorFlow's first runs
    queue.check("c", 10000, remaining=0.001)  # too few calls yet to know the pace
    queue.called(64, 0.064)  # the best pace is 1 ms an image, whatever came before it
    queue.check("c", 40, remaining=0.05)
    with pytest.raises(TooLate) as raised:
        queue.check("c", 60, remaining=0.05)
    assert (raised.value.images, round(raised.value.secs, 3)) == (60, 0.06)
    queue.add(Task(Version(), "s", images(30), client="c"))
    with pytest.raises(TooLate):  # its own 30 images come first: 70 ms
        queue.check("c", 40, remaining=0.05)
    queue.check("d", 40, remaining=0.05)  # another client's queue is not ahead of d's turn
    queue.check("c", 40)  # no deadline: the bounds only


def test_a_grpc_request_that_cannot_be_answered_by_its_deadline_is_refused_before_the_model_runs_it(tmp_path):
    serve = Serve(tmp_path / "model")
    serve.export(100)
    served = serve.versions.acquire()
    run, sizes = served.model.run, []

    def one_ms_an_image(signature_name, inputs):
        sizes.append(len(inputs["images"]))
        time.sleep(0.001 * sizes[-1])
        return run(signature_name, inputs)

    served.model.run = one_ms_an_image
    for _ in range(PACE_MIN_CALLS):
        serve.batcher.submit(served, "images", {"images": np.zeros((16, 28, 28, 1), np.float32)}).result(10)
    served.release()
    client = GrpcClient(serve.grpc_port)
    try:
        request = client.predict_request({}, "images")
        request.inputs["images"].CopyFrom(tiny_but_huge(3000))  # 3 s of model time at the best pace
        with pytest.raises(grpc.RpcError) as raised:  # refused at once, answered after REFUSAL_DELAY_SECS
            client.predictions.Predict(request, timeout=2)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert raised.value.details().startswith(ERR_TOO_LATE.split("{")[0]), raised.value.details()
        assert sizes == [16] * PACE_MIN_CALLS and refusals(serve)["deadline"] == 1  # the model never saw it
        request.inputs["images"].CopyFrom(tiny_but_huge(20))
        assert len(client.predictions.Predict(request, timeout=10).outputs["class_ids"].int_val) == 20
    finally:
        client.close()
        serve.close()
