"""TF Serving gRPC messages as their wire bytes, made with numpy alone (no TensorFlow, no protobuf runtime), for
the tests and benchmarks/serve_abuse.py: a client sends them through a raw-bytes method of its channel, so that
building a 31 MB message costs it nothing. The encoding: https://protobuf.dev/programming-guides/encoding/."""

from __future__ import annotations

import numpy as np

from estimator_mnist.tf_model.serve.tensor_wire import varint as _varint  # no TensorFlow, no protobuf

PREDICT = "/tensorflow.serving.PredictionService/Predict"
STATUS = "/tensorflow.serving.ModelService/GetModelStatus"


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def predict_bytes(images: int, packed: bool = True, name: str = "mnist", seed: int = 0) -> bytes:
    """A PredictRequest of `images` random float images for the `images` signature: tensor_content (field 4),
    or float_val (5), packed, as protobuf's serializer writes a float_val filled value by value."""
    values = np.random.RandomState(seed).rand(images, 28, 28, 1).astype("<f4").tobytes()
    shape = b"".join(_field(2, b"\x08" + _varint(size)) for size in (images, 28, 28, 1))
    tensor = b"\x08\x01" + _field(2, shape) + _field(4 if packed else 5, values)  # dtype DT_FLOAT
    spec = _field(1, name.encode()) + _field(3, b"images")
    return _field(1, spec) + _field(2, _field(1, b"images") + _field(2, tensor))


def tiny_huge_bytes(images: int, name: str = "mnist") -> bytes:
    """A PredictRequest of a few dozen bytes whose shape declares `images` float images, filled by its one
    float_val (FromProto repeats the last value): what a request costs is its images, not its bytes."""
    shape = b"".join(_field(2, b"\x08" + _varint(size)) for size in (images, 28, 28, 1))
    tensor = b"\x08\x01" + _field(2, shape) + _field(5, np.float32(0.5).astype("<f4").tobytes())
    spec = _field(1, name.encode()) + _field(3, b"images")
    return _field(1, spec) + _field(2, _field(1, b"images") + _field(2, tensor))


def status_bytes(name: str) -> bytes:
    """A GetModelStatusRequest for the model `name`."""
    return _field(1, _field(1, name.encode()))


def raw_channel(port: int, host: str = "127.0.0.1"):
    """A channel of its own (one connection) that sends and receives up to 64 MiB."""
    import grpc  # pylint: disable=import-outside-toplevel

    return grpc.insecure_channel(f"{host}:{port}", options=[
        ("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20),
        ("grpc.use_local_subchannel_pool", 1)])
