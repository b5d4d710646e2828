"""A TF Serving gRPC client for the tests and the benchmark, as Serving's documentation writes one: the stubs of
tensorflow-serving-api, TensorProtos made by tf.make_tensor_proto. Importing it imports TensorFlow."""

from __future__ import annotations

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc)


class GrpcClient:
    def __init__(self, port: int, host: str = "127.0.0.1"):
        self.channel = grpc.insecure_channel(f"{host}:{port}", options=[
            ("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)])
        self.predictions = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    @staticmethod
    def predict_request(inputs: dict, signature: str = "", name: str = "mnist") -> predict_pb2.PredictRequest:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = name
        request.model_spec.signature_name = signature
        for key, value in inputs.items():
            request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
        return request

    def predict(self, inputs: dict, signature: str = "", name: str = "mnist", timeout: float = 60) -> dict:
        """{output: array} of one Predict."""
        response = self.predictions.Predict(self.predict_request(inputs, signature, name), timeout=timeout)
        return {key: tf.make_ndarray(proto) for key, proto in response.outputs.items()}

    def classes_of_pngs(self, pngs: list, timeout: float = 60) -> list:
        return self.predict({"image_bytes": pngs}, timeout=timeout)["class_ids"].tolist()

    def classes_of_floats(self, images: np.ndarray, timeout: float = 60) -> list:
        return self.predict({"images": images.astype(np.float32)}, "images", timeout=timeout)["class_ids"].tolist()

    def metadata(self, name: str = "mnist"):
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = name
        response = self.predictions.GetModelMetadata(request, timeout=30)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        return response, signatures

    def status(self, name: str = "mnist"):
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = name
        return self.models.GetModelStatus(request, timeout=30)


def code_of(call, *args, **kwargs):
    """(grpc.StatusCode, details) of a call that fails, or (OK, None)."""
    try:
        call(*args, **kwargs)
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, None
