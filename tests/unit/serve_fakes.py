"""A stand-in export for serve's unit tests: the two signatures of the product's exports (encoded images and
float images, three outputs each), with a session's errors for a bad image, a wrong shape or a wrong dtype, and
a gate that holds its calls (a model call that hangs); and one serve with it, REST in Flask's test client and
gRPC on a loopback port of this process."""

from __future__ import annotations

import queue
import socket
import threading
from contextlib import contextmanager

import numpy as np
from tensorflow.core.framework import tensor_shape_pb2, types_pb2
from tensorflow.core.protobuf import meta_graph_pb2

from estimator_mnist.tf_model.serve.app import create_app
from estimator_mnist.tf_model.serve.batcher import Batcher
from estimator_mnist.tf_model.serve.grpc_server import GrpcServer
from estimator_mnist.tf_model.serve.http_server import HttpServer
from estimator_mnist.tf_model.serve.serving_api import ServingApi
from estimator_mnist.tf_model.serve.serving_errors import invalid
from estimator_mnist.tf_model.serve.versions import Versions
from tests.helpers import free_ports, make_export

INPUTS = {"serving_default": ("image_bytes", types_pb2.DT_STRING, [-1]),
          "images": ("images", types_pb2.DT_FLOAT, [-1, 28, 28, 1])}
OUTPUTS = {"class_ids": types_pb2.DT_INT32, "probabilities": types_pb2.DT_FLOAT, "logits": types_pb2.DT_FLOAT}
PNG = b"\x89PNG\r\n\x1a\n"


def _signature(name: str) -> meta_graph_pb2.SignatureDef:
    key, dtype, dims = INPUTS[name]
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims])
    definition = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    definition.inputs[key].CopyFrom(meta_graph_pb2.TensorInfo(name=f"{key}:0", dtype=dtype, tensor_shape=shape))
    for output, output_dtype in OUTPUTS.items():
        definition.outputs[output].CopyFrom(meta_graph_pb2.TensorInfo(name=f"{output}:0", dtype=output_dtype))
    return definition


class StandIn:
    """Classes by the PNG's last byte, or by the float image's sum; `gate` (an Event) holds every call."""

    gate = None

    def __init__(self, export_dir):
        self.export_dir, self.closed = export_dir, False
        self.signature_protos = {name: _signature(name) for name in INPUTS}
        self.signature_defs = {name: {"inputs": {INPUTS[name][0]: {}}, "outputs": dict.fromkeys(OUTPUTS),
                                      "method_name": "tensorflow/serving/predict"} for name in INPUTS}

    def input_types(self, signature_name):
        name = signature_name or "serving_default"
        if name not in INPUTS:
            raise invalid(f'Serving signature name: "{name}" not found in signature def')
        return {INPUTS[name][0]: types_pb2.DataType.Name(INPUTS[name][1])}

    def output_count(self, signature_name):
        if (signature_name or "serving_default") not in INPUTS:
            raise invalid(f"No signature was found with the name: {signature_name}")
        return len(OUTPUTS)

    def run(self, signature_name, inputs):
        if self.gate is not None:
            self.gate.wait()
        name = signature_name or "serving_default"
        array = inputs[INPUTS[name][0]]
        if name == "images":
            if array.dtype != np.float32 or array.ndim != 4 or array.shape[1:] != (28, 28, 1):
                raise invalid(f"Cannot feed value of shape {array.shape} for Tensor images:0, which has shape "
                              "(?, 28, 28, 1)")
            classes = (np.nan_to_num(array.reshape(len(array), -1).sum(axis=1)) % 10).astype(np.int32)
        else:
            if array.ndim != 1 or any(not isinstance(v, bytes) or not v.startswith(PNG) for v in array):
                raise invalid("Unknown image file format. One of JPEG, PNG, GIF, BMP required.")
            classes = np.array([v[-1] % 10 for v in array], np.int32)
        probabilities = np.eye(10, dtype=np.float32)[classes]
        return {"class_ids": classes, "probabilities": probabilities, "logits": probabilities * 3}

    def close(self):
        self.closed = True


class Serve:
    """One serve of StandIn exports under `model_dir`, REST in Flask's test client, gRPC on a loopback port."""

    def __init__(self, model_dir, deadline_secs: float = 30.0, cors: bool = False, max_body_bytes: int = 1 << 20):
        model_dir.mkdir(parents=True, exist_ok=True)
        self.model_dir = model_dir
        self.batcher = Batcher(timeout_secs=0)
        self.versions = Versions(str(model_dir), StandIn, log=lambda message: None,
                                 unload_wait_secs=deadline_secs, retire=self.batcher.retire)
        self.api = ServingApi("mnist", self.versions, self.batcher, deadline_secs=deadline_secs)
        self.http = create_app(self.api, max_body_bytes=max_body_bytes, cors=cors).test_client()
        self.grpc_port = free_ports(1)[0]
        self.grpc = GrpcServer(self.api, "127.0.0.1", self.grpc_port, 1 << 22)

    def export(self, stamp: int) -> None:
        make_export(self.model_dir, stamp)
        self.versions.poll()

    def close(self) -> None:
        self.grpc.close()
        self.batcher.stop(timeout=1)
        self.versions.stop(wait_secs=1)


def hold_calls(serve: Serve) -> threading.Event:
    """Every model call of the served version waits for the returned Event."""
    gate = threading.Event()
    served = serve.versions.acquire()
    served.model.gate = gate
    served.release()
    return gate


@contextmanager
def live_http(serve: Serve, max_body_bytes: int, cors: bool = False, threads: int = 4, receive_secs: float = 30.0):
    """serve's app under the real waitress server on a loopback socket, driven by one thread as server.py's main
    thread drives it: (HttpServer, base URL, port, on_loop). `on_loop(call)` runs `call` on that thread between
    two polls and returns once it did, as serve stops accepting on the thread that polls (closing the listening
    socket from another thread while the poll waits on it ends the poll with EBADF)."""
    sock = socket.create_server(("127.0.0.1", 0))
    app = create_app(serve.api, max_body_bytes=max_body_bytes, cors=cors)
    http = HttpServer(app, sock, serve.api.lifecycle, max_body_bytes, threads=threads, receive_secs=receive_secs)
    stop, calls = threading.Event(), queue.Queue()

    def drive():
        while not stop.is_set():
            while not calls.empty():
                call, done = calls.get()
                call()
                done.set()
            http.poll(0.05)

    def on_loop(call) -> None:
        done = threading.Event()
        calls.put((call, done))
        assert done.wait(10), "the poll thread did not run the call"

    loop = threading.Thread(target=drive)
    loop.start()
    port = sock.getsockname()[1]
    try:
        yield http, f"http://127.0.0.1:{port}", port, on_loop
    finally:
        stop.set()
        loop.join()
        http.close()
