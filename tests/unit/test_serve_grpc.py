"""serve's gRPC API with a stand-in export, through tensorflow-serving-api's stubs on a loopback port of this
process: each method's answers and status codes as Serving 2.15 gives them, the deadline with a newer version
answering meanwhile, and REST and gRPC counted in the metrics page, which prometheus-client's parser reads."""

import threading
import time

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, get_model_status_pb2,
                                     inference_pb2, regression_pb2)

from estimator_mnist.tf_model.serve import grpc_api, metrics
from tests.serve_grpc import code_of, GrpcClient
from tests.unit.serve_fakes import hold_calls, PNG, Serve

C = grpc.StatusCode


@pytest.fixture
def serve(tmp_path):
    serve = Serve(tmp_path / "model", deadline_secs=1.0)
    serve.export(100)
    client = GrpcClient(serve.grpc_port)
    yield serve, client
    client.close()
    serve.close()


def test_predict_on_both_signatures_and_the_model_spec_it_answers_with(serve):
    _, client = serve
    response = client.predictions.Predict(client.predict_request({"image_bytes": [PNG + b"\x07", PNG + b"\x03"]}))
    assert response.model_spec.name == "mnist" and response.model_spec.version.value == 100
    assert response.model_spec.signature_name == "serving_default" and sorted(response.outputs) == [
        "class_ids", "logits", "probabilities"]
    assert client.classes_of_pngs([PNG + b"\x07", PNG + b"\x03"]) == [7, 3]
    assert client.classes_of_floats(np.full((2, 28, 28, 1), 0.01, np.float32)) == [7, 7]  # sum 7.84
    filtered = client.predict_request({"image_bytes": [PNG]})
    filtered.output_filter.append("class_ids")
    assert list(client.predictions.Predict(filtered).outputs) == ["class_ids"]


def predict_with(client, **changes):
    request = client.predict_request({"image_bytes": [PNG]})
    for key, value in changes.items():
        if key == "inputs":
            request.inputs.clear()
            for alias, proto in value.items():
                request.inputs[alias].CopyFrom(proto)
        elif key == "output_filter":
            request.output_filter.extend(value)
        else:
            setattr(request.model_spec, key, value)
    return request


STRING = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[PNG])
BAD = [
    ({"name": ""}, C.INVALID_ARGUMENT, "ModelSpec has no name specified."),
    ({"name": "other"}, C.NOT_FOUND, "Servable not found for request: Latest(other)"),
    ({"version_label": "stable"}, C.INVALID_ARGUMENT, "Unrecognized servable version label: stable"),
    ({"signature_name": "nope"}, C.FAILED_PRECONDITION, 'Serving signature key "nope" not found.'),
    ({"inputs": {"image_bytes": STRING, "x": STRING}}, C.INVALID_ARGUMENT,
     "input size does not match signature: 2!=1 len({image_bytes,x}) != len({image_bytes}). Sent extra: {x}. "
     "Missing but required: {}."),
    ({"inputs": {"x": STRING}}, C.INVALID_ARGUMENT,
     "input tensor alias not found in signature: x. Inputs expected to be in the set {image_bytes}."),
    ({"inputs": {"image_bytes": tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1])}},
     C.INVALID_ARGUMENT, "Expects arg[0] to be string but float is provided"),
    ({"inputs": {"image_bytes": tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=b"abc")}},
     C.INVALID_ARGUMENT, "tensor parsing error: image_bytes"),
    ({"output_filter": ["nope"]}, C.INVALID_ARGUMENT, "output tensor alias not found in signature: nope Outputs "
                                                      "expected to be in the set {class_ids,logits,probabilities}."),
    ({"output_filter": ["logits", "logits"]}, C.INVALID_ARGUMENT, "duplicate output tensor alias: logits"),
]


@pytest.mark.parametrize("changes,code,details", BAD, ids=[b[2][:40] for b in BAD])
def test_bad_predict_requests_get_serving_s_status_codes(serve, changes, code, details):
    _, client = serve
    assert code_of(client.predictions.Predict, predict_with(client, **changes)) == (code, details)


def test_an_unknown_version_and_no_model_spec(serve):
    _, client = serve
    request = predict_with(client)
    request.model_spec.version.value = 7
    assert code_of(client.predictions.Predict, request) == (C.NOT_FOUND, "Servable not found for request: "
                                                                         "Specific(mnist, 7)")
    request.ClearField("model_spec")
    assert code_of(client.predictions.Predict, request) == (C.INVALID_ARGUMENT, "Missing ModelSpec")


def test_metadata_and_status_as_serving_gives_them(serve):
    _, client = serve
    response, signatures = client.metadata()
    assert response.model_spec.name == "mnist" and response.model_spec.version.value == 100
    assert sorted(signatures.signature_def) == ["images", "serving_default"]
    assert signatures.signature_def["images"].inputs["images"].dtype == types_pb2.DT_FLOAT
    status = client.status().model_version_status
    assert [(s.version, s.state, s.status.error_code) for s in status] == [
        (100, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0)]
    bare = get_model_metadata_pb2.GetModelMetadataRequest()
    bare.model_spec.name = "mnist"
    assert code_of(client.predictions.GetModelMetadata, bare) == (C.INVALID_ARGUMENT, grpc_api.ERR_NO_FIELD)
    bare.metadata_field.append("other")
    assert code_of(client.predictions.GetModelMetadata, bare) == (C.INVALID_ARGUMENT,
                                                                  "Metadata field other is not supported")
    assert code_of(client.status, "other") == (C.NOT_FOUND, "Could not find any versions of model other")


def test_classify_regress_and_multi_inference_refuse_predict_signatures_as_serving_does(serve):
    _, client = serve
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = "mnist"
    assert code_of(client.predictions.Classify, classify) == (C.INVALID_ARGUMENT,
                                                              "Expected one or two output Tensors, found 3")
    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name = "mnist"
    regress.model_spec.signature_name = "nope"
    assert code_of(client.predictions.Regress, regress) == (C.INVALID_ARGUMENT,
                                                            "No signature was found with the name: nope")
    regress.model_spec.signature_name = "images"
    assert code_of(client.predictions.Regress, regress) == (C.INVALID_ARGUMENT, "Expected one output Tensor.")
    multi = inference_pb2.MultiInferenceRequest()
    assert code_of(client.predictions.MultiInference, multi) == (C.INVALID_ARGUMENT, "ModelSpec has no name specified.")
    task = multi.tasks.add(method_name="tensorflow/serving/predict")
    task.model_spec.name = "mnist"
    assert code_of(client.predictions.MultiInference, multi) == (
        C.UNIMPLEMENTED, "Unsupported signature method_name: tensorflow/serving/predict")
    task.method_name = "tensorflow/serving/classify"
    assert code_of(client.predictions.MultiInference, multi)[0] == C.INVALID_ARGUMENT


def test_a_call_that_hangs_ends_at_the_deadline_and_a_newer_version_answers_meanwhile(serve):
    serve_, client = serve
    gate = hold_calls(serve_)
    answers = {}
    hung = [threading.Thread(target=lambda: answers.update(
                rest=serve_.http.post("/v1/models/mnist:predict", json={"instances": [{"b64": "iVBORw0KGgoH"}]}))),
            threading.Thread(target=lambda: answers.update(grpc=code_of(client.predictions.Predict,
                                                                        predict_with(client), timeout=30)))]
    started = time.monotonic()
    for thread in hung:
        thread.start()
    time.sleep(0.1)
    serve_.export(200)  # loaded beside the hung one, not held up by it
    assert client.classes_of_pngs([PNG + b"\x05"]) == [5]
    assert all(thread.is_alive() for thread in hung)
    for thread in hung:
        thread.join(5)
    assert 0.9 < time.monotonic() - started < 3
    assert answers["rest"].status_code == 504 and answers["rest"].json["error"].startswith("Deadline exceeded")
    assert answers["grpc"][0] == C.DEADLINE_EXCEEDED and answers["grpc"][1].startswith("Deadline exceeded")
    deadline = time.monotonic() + 5
    while (100, "END", "OK", "") not in serve_.versions.states() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (100, "END", "OK", "") in serve_.versions.states()  # unloaded after a bounded wait, its call still held
    gate.set()


def test_the_metrics_page_counts_rest_and_grpc_requests(serve):
    serve_, client = serve
    for _ in range(3):
        assert client.classes_of_pngs([PNG]) == [0]
    serve_.http.post("/v1/models/mnist:predict", json={"signature_name": "images", "instances": [[1.0]]})
    serve_.http.post("/v1/models/mnist:predict", json={"instances": [{"b64": "iVBORw0KGgoA"}]})
    code_of(client.predictions.Predict, predict_with(client, name="other"))
    page = serve_.http.get(metrics.PATH)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/plain")
    families = {family.name: family for family in text_string_to_metric_families(page.data.decode())}
    counts = {(s.labels["API"], s.labels["entrypoint"], s.labels["model_name"], s.labels["signature_name"],
               s.labels["status"]): s.value for s in families[":tensorflow:serving:request_count"].samples}
    assert counts == {("Predict", "GRPC", "mnist", "", "OK"): 3, ("Predict", "REST", "mnist", "images",
                                                                   "INVALID_ARGUMENT"): 1,
                      ("Predict", "REST", "mnist", "", "OK"): 1, ("Predict", "GRPC", "(other)", "", "NOT_FOUND"): 1}
    latency = families[":tensorflow:serving:request_latency"].samples
    assert {s.value for s in latency if s.name.endswith("_count") and s.labels["entrypoint"] == "GRPC"} == {3}
    runs = families[":tensorflow:serving:batching_session:wrapped_run_count"].samples
    assert [s.value for s in runs] == [5]  # the bad-shaped one reached the model, as a session run fails
    states = families["estimator_mnist_serve_version_state"].samples
    assert [(s.labels["version"], s.labels["state"], s.value) for s in states] == [("100", "AVAILABLE", 1)]
    assert families["estimator_mnist_serve_draining"].samples[0].value == 0
