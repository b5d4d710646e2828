"""serve under abusive traffic, in-process: a large request split into chunks that take turns with others, each
version's queue bounded in images (REST 503, gRPC RESOURCE_EXHAUSTED), a request given up dropping its inputs at
once, the drain's end answering UNAVAILABLE, a packed float_val read as tensor_content exactly where FromProto
reads them alike, and the version poller's stop bounded whatever it is loading."""

import threading
import time
import weakref

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tensorflow_serving.apis import predict_pb2

from estimator_mnist.tf_model.serve import tensor_wire
from estimator_mnist.tf_model.serve.batcher import Batcher, give_up, QueueFull
from estimator_mnist.tf_model.serve.lifecycle import ERR_STOPPING
from estimator_mnist.tf_model.serve.serving_errors import ServingError
from estimator_mnist.tf_model.serve.tensor_protos import to_array
from estimator_mnist.tf_model.serve.versions import Versions
from tests.serve_grpc import code_of, GrpcClient
from tests.unit.serve_fakes import hold_calls, Serve
from tests.unit.test_serve_fuzz import FUZZ, protos


class Recorder:
    """A model whose outputs are each image's first value; it records each call's size and can be held."""

    def __init__(self):
        self.sizes, self.gate, self.first_call = [], threading.Event(), threading.Event()
        self.gate.set()

    def run(self, signature, inputs):
        self.sizes.append(len(inputs["x"]))
        self.first_call.set()
        self.gate.wait()
        time.sleep(0.002)
        return {"y": inputs["x"][:, 0].copy()}


class Version:
    number = 1

    def __init__(self):
        self.model = Recorder()


def images(count: int, start: int = 0) -> dict:
    return {"x": np.arange(start, start + count, dtype=np.float32).reshape(count, 1).repeat(3, axis=1)}


def test_a_large_request_is_split_and_a_small_one_sent_later_is_answered_before_it_ends():
    batcher, version = Batcher(max_batch_size=8, timeout_secs=0), Version()
    version.model.gate.clear()
    large = batcher.submit(version, "s", images(200))
    assert version.model.first_call.wait(10)
    small = batcher.submit(version, "s", images(1, start=1000))
    version.model.gate.set()
    assert small.result(10)["y"].tolist() == [1000.0]
    assert not large.done()  # the small request did not wait for the 25 chunks of the large one
    assert large.result(10)["y"].tolist() == list(range(200))  # its chunks, in order
    assert max(version.model.sizes) == 8 and sum(version.model.sizes) == 201
    batcher.stop(timeout=5)


def test_a_full_queue_refuses_and_a_request_given_up_drops_its_inputs_at_once():
    batcher, version = Batcher(max_batch_size=4, timeout_secs=0, max_queued_images=10), Version()
    version.model.gate.clear()
    running = batcher.submit(version, "s", images(4))
    assert version.model.first_call.wait(10)
    queued_inputs = images(6)
    queued = batcher.submit(version, "s", queued_inputs)
    with pytest.raises(QueueFull):
        batcher.submit(version, "s", images(1))
    gone = weakref.ref(queued_inputs["x"])
    del queued_inputs
    give_up(queued)  # its deadline passed: out of the queue now, not when the model's loop reaches it
    assert gone() is None and batcher.queued_images() == 4
    later = batcher.submit(version, "s", images(6, start=10))  # the room it left
    version.model.gate.set()
    assert running.result(10)["y"].tolist() == [0.0, 1.0, 2.0, 3.0] and later.result(10)["y"][0] == 10.0
    assert version.model.sizes == [4, 4, 2]  # the one given up never ran
    batcher.stop(timeout=5)


def test_a_chunked_request_given_up_midway_leaves_the_queue():
    batcher, version = Batcher(max_batch_size=2, timeout_secs=0), Version()
    version.model.gate.clear()
    large = batcher.submit(version, "s", images(100))
    assert version.model.first_call.wait(10)
    give_up(large)  # running: it cannot be cancelled, it is failed instead
    version.model.gate.set()
    with pytest.raises(Exception):
        large.result(10)
    deadline = time.monotonic() + 10
    while batcher.queued_images() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert batcher.queued_images() == 0 and len(version.model.sizes) == 1
    batcher.stop(timeout=5)


def test_full_queue_is_503_over_rest_and_resource_exhausted_over_grpc_then_the_drain_s_end_unavailable(tmp_path):
    serve = Serve(tmp_path / "model", deadline_secs=10.0)
    serve.export(100)
    serve.batcher.max_queued_images = 2
    gate = hold_calls(serve)
    client = GrpcClient(serve.grpc_port)
    holding = threading.Thread(target=lambda: serve.http.post("/v1/models/mnist:predict",
                                                              json={"instances": [{"b64": "iVBORw0KGgoB"}] * 2}))
    holding.start()
    deadline = time.monotonic() + 10
    while serve.batcher.queued_images() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    answer = serve.http.post("/v1/models/mnist:predict", json={"instances": [{"b64": "iVBORw0KGgoB"}]})
    assert answer.status_code == 503 and list(answer.json) == ["error"]
    assert "holds 2 images already (serve's --max-queued-images)" in answer.json["error"]
    code, details = code_of(client.classes_of_pngs, [b"\x89PNG\r\n\x1a\n\x01"], timeout=10)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-queued-images" in details
    waiting = {}
    rpc = threading.Thread(target=lambda: waiting.update(answer=code_of(
        client.classes_of_pngs, [b"\x89PNG\r\n\x1a\n\x01"], timeout=10)))
    serve.batcher.max_queued_images = 100
    rpc.start()
    time.sleep(0.3)
    serve.api.abandon()  # the drain's end: every request waiting for the model answered now, not reset
    rpc.join(10)
    holding.join(10)
    assert waiting["answer"] == (grpc.StatusCode.UNAVAILABLE, ERR_STOPPING)
    gate.set()
    client.close()
    serve.close()


def test_a_large_float_val_request_gets_the_same_answer_as_packed(tmp_path):
    serve = Serve(tmp_path / "model")
    serve.export(100)
    client = GrpcClient(serve.grpc_port)
    floats = np.random.RandomState(0).rand(40, 28, 28, 1).astype(np.float32)
    packed = client.predict_request({"images": floats}, "images")
    by_values = client.predict_request({}, "images")
    tensor = by_values.inputs["images"]
    tensor.dtype, tensor.float_val[:] = 1, floats.ravel().tolist()
    for size in floats.shape:
        tensor.tensor_shape.dim.add().size = size
    assert len(by_values.SerializeToString()) > tensor_wire.MIN_BYTES
    answers = [client.predictions.Predict(request, timeout=30) for request in (packed, by_values)]
    assert answers[0] == answers[1] and len(answers[0].outputs["class_ids"].int_val) == 40
    client.close()
    serve.close()


def _read(request_bytes: bytes, alias: str):
    try:
        proto = predict_pb2.PredictRequest.FromString(request_bytes).inputs[alias]
        return to_array(proto, alias, 1, 0).tobytes()
    except ServingError as exc:
        return exc.message


@FUZZ
@given(proto=protos, alias=st.sampled_from(["images", "x"]), other=st.booleans())
def test_float_val_moved_to_tensor_content_reads_as_from_proto_reads_the_original(monkeypatch, proto, alias, other):
    monkeypatch.setattr(tensor_wire, "MIN_BYTES", 0)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mnist"
    request.inputs[alias].CopyFrom(proto)
    if other:
        request.inputs["other"].CopyFrom(proto)
        request.output_filter.append("class_ids")
    raw = request.SerializeToString()
    rewritten = tensor_wire.packed_floats_as_content(raw)
    assert _read(rewritten, alias) == _read(raw, alias)
    parsed = predict_pb2.PredictRequest.FromString(rewritten)
    assert parsed.model_spec == request.model_spec and parsed.output_filter == request.output_filter


def test_bytes_that_are_no_message_are_left_to_protobuf():
    for raw in (b"\x12\xff", b"\x0b", b"\x12\x05\x12\x03\x0a\x01", b""):
        assert tensor_wire.packed_floats_as_content(raw) is raw


def test_stopping_the_versions_is_bounded_while_an_export_loads(tmp_path):
    loading, release = threading.Event(), threading.Event()

    def load(export_dir):
        loading.set()
        release.wait(30)
        raise RuntimeError("never finished")

    (tmp_path / "model" / "export" / "best" / "100").mkdir(parents=True)
    (tmp_path / "model" / "export" / "best" / "100" / "saved_model.pb").write_bytes(b"")
    versions = Versions(str(tmp_path / "model"), load, log=lambda message: None, poll_secs=0.01)
    versions.start()
    assert loading.wait(10)
    started = time.monotonic()
    assert versions.stop(wait_secs=0.5) is False  # the loader still runs: said, not waited for
    assert time.monotonic() - started < 5
    release.set()


def test_a_large_message_late_or_beyond_the_pending_bound_is_refused_unread():
    import asyncio  # pylint: disable=import-outside-toplevel

    from estimator_mnist.tf_model.serve.grpc_codec import Codec, ERR_LATE  # pylint: disable=import-outside-toplevel

    class Context:
        def __init__(self, remaining):
            self.remaining, self.aborted = remaining, None

        def time_remaining(self):
            return self.remaining

        async def abort(self, code, details):
            self.aborted = (code, details)
            raise RuntimeError("aborted")

    async def method(request, context):
        return request  # parsed: the message itself answers

    codec = Codec()
    behavior = codec.handler(method, predict_pb2.PredictRequest).unary_unary
    raw = predict_pb2.PredictRequest(output_filter=["x" * 20000]).SerializeToString()  # large: read in the pool
    late, timely = Context(-0.01), Context(5.0)
    with pytest.raises(RuntimeError):
        asyncio.run(behavior(raw, late))
    assert late.aborted == (grpc.StatusCode.DEADLINE_EXCEEDED, ERR_LATE)
    assert asyncio.run(behavior(raw, timely)) == raw and timely.aborted is None
    codec.pending_bytes, crowded = codec.max_pending_bytes, Context(5.0)  # large messages waiting already
    with pytest.raises(RuntimeError):
        asyncio.run(behavior(raw, crowded))
    assert crowded.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED and "MiB of large requests" in crowded.aborted[1]
    codec.close()
