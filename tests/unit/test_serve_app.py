"""serve's HTTP app through Flask's test client, with a stand-in model (no TensorFlow, no socket): Serving's
dispatch of paths and methods, labels, CORS preflight, the body limit, a failure becoming Serving's 500 body."""

import numpy as np
import pytest

from estimator_mnist.tf_model.serve.app import create_app, ServingApi
from estimator_mnist.tf_model.serve.batcher import Batcher
from estimator_mnist.tf_model.serve.versions import Versions
from tests.helpers import make_export


class StandIn:
    """Classes by the first byte of each image; b"!" fails as an image TensorFlow cannot decode would."""

    signature_defs = {"serving_default": {"method_name": "tensorflow/serving/predict"}}

    def __init__(self, export_dir):
        self.export_dir = export_dir

    def input_types(self, signature_name):
        return {"image_bytes": "DT_STRING"}

    def output_count(self, signature_name):
        return 3

    def run(self, signature_name, inputs):
        images = inputs["image_bytes"]
        if any(image == b"!" for image in images):
            raise RuntimeError("a stand-in's failure")
        return {"class_ids": np.array([image[0] % 10 for image in images], np.int32)}

    def close(self):
        pass


@pytest.fixture
def client(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    versions = Versions(str(model_dir), StandIn, log=lambda m: None)
    batcher = Batcher(timeout_secs=0)
    api = ServingApi("mnist", versions, batcher)
    yield create_app(api, max_body_bytes=50).test_client(), model_dir, versions
    batcher.stop()


def test_before_and_after_the_first_export(client):
    http, model_dir, versions = client
    assert http.get("/v1/models/mnist").json == {"error": "Could not find any versions of model mnist"}
    assert http.get("/estimator-mnist/model").json == {"name": "mnist", "version": None}
    make_export(model_dir, 100)
    versions.poll()
    answer = http.post("/v1/models/mnist:predict", data=b'{"instances": [{"b64": "Nw=="}]}')  # "7"
    assert answer.status_code == 200 and answer.json == {"predictions": [5]} and answer.headers["X-Model-Version"] == "100"
    columnar = http.post("/v1/models/mnist/versions/100:predict", data=b'{"inputs": [{"b64": "Nw=="}]}')
    assert columnar.json == {"outputs": [5]}
    assert http.post("/v1/models/mnist/versions/99:predict", data=b'{"inputs": [{"b64": "Nw=="}]}').json == {
        "error": "Servable not found for request: Specific(mnist, 99)"}
    assert http.get("/v1/models/mnist/metadata").json["model_spec"] == {"name": "mnist", "signature_name": "",
                                                                         "version": "100"}


@pytest.mark.parametrize("method,path,status,error", [
    ("GET", "/v1/models", 400, "Missing model name in request."),
    ("PUT", "/v1/models/mnist", 400, "Malformed request: PUT /v1/models/mnist"),
    ("GET", "/v1/models/mnist:predict", 400, "Malformed request: GET /v1/models/mnist:predict"),
    ("POST", "/v1/models/mnist/labels/stable:predict", 400, "Unrecognized servable version label: stable"),
    ("GET", "/v1/models/mnist/labels/stable/metadata", 400, "Unrecognized servable version label: stable"),
    ("GET", "/v1/models/mnist/labels/stable", 404, "Could not find any versions of model mnist"),
    ("OPTIONS", "/v1/models/mnist:predict", 400, "Origin header is missing in CORS preflight"),
    ("GET", "/v2/models/mnist", 404, "Not found: /v2/models/mnist"),
])
def test_paths_and_methods_are_dispatched_as_serving_does(client, method, path, status, error):
    answer = client[0].open(path, method=method)
    assert (answer.status_code, answer.json) == (status, {"error": error})


def test_a_preflight_with_an_origin_is_answered(client):
    answer = client[0].options("/v1/models/mnist:predict", headers={"Origin": "http://example.test"})
    assert answer.status_code == 200


def test_the_body_limit_and_an_unexpected_failure(client):
    http, model_dir, versions = client
    make_export(model_dir, 100)
    versions.poll()
    too_big = http.post("/v1/models/mnist:predict", data=b'{"instances": [{"b64": "' + b"A" * 60 + b'"}]}')
    assert too_big.status_code == 400 and too_big.json["error"].startswith("Request body is larger than 50 bytes")
    failed = http.post("/v1/models/mnist:predict", data=b'{"instances": [{"b64": "IQ=="}]}')  # "!"
    assert (failed.status_code, failed.json) == (500, {"error": "RuntimeError: a stand-in's failure"})
    assert http.post("/v1/models/mnist:predict", data=b'{"instances": [{"b64": "Nw=="}]}').status_code == 200
