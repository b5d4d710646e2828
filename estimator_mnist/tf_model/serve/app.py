"""The HTTP app: TensorFlow Serving's REST API under /v1/, the product's own /estimator-mnist/model, and the page.

Paths are matched with Serving's own regular expressions
(model_servers/http_rest_api_util.cc), methods dispatched as its
HttpRestApiHandler::ProcessRequest does, and every failure answered with
its status code and `{"error": ...}` body. No TensorFlow: the versions,
their models and the batcher come in from server.py.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Optional

from flask import Flask, Response, request

from estimator_mnist.tf_model.serve import request_json, response_json
from estimator_mnist.tf_model.serve.batcher import Batcher
from estimator_mnist.tf_model.serve.serving_errors import error_body, invalid, ServingError
from estimator_mnist.tf_model.serve.versions import evaluation_of, Versions

PREDICTION_PATH = re.compile(
    r"(?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)")
STATUS_PATH = re.compile(r"(?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:\/(metadata))?")
SERVING_PATH = re.compile(r"(?i)/v1/.*")
MAX_BODY_BYTES = 10 * 1024 * 1024
MAX_INSTANCES = 10000  # a request may carry MNIST's whole test set, no more
INFO_PATH = "/estimator-mnist/model"

ERR_PREFLIGHT = "Origin header is missing in CORS preflight"
ERR_MALFORMED = "Malformed request: {method} {path}"
ERR_NO_MODEL_NAME = "Missing model name in request."
ERR_LABEL = "Unrecognized servable version label: {label}"
ERR_NOT_FOUND = "Servable not found for request: {request}"
ERR_NO_VERSIONS = "Could not find any versions of model {name}"
ERR_NO_VERSION = "Could not find version {version} of model {name}"
ERR_BODY_SIZE = ("Request body is larger than {limit} bytes, the limit of estimator-mnist serve; send fewer "
                 "instances per request")
ERR_TASK_SIZE = "Task size {size} is larger than maximum input batch size {limit}"  # TensorFlow's batching
ERR_CLASSIFY_OUTPUTS = "Expected one or two output Tensors, found {count}"  # classifier.cc
ERR_REGRESS_OUTPUTS = "Expected one output Tensor."  # regressor.cc


def _json(body: str, status: int = 200, version: Optional[int] = None) -> Response:
    response = Response(body, status=status, mimetype="application/json")
    if version is not None:  # which version answered, for the page; Serving's bodies keep their fields
        response.headers["X-Model-Version"] = str(version)
    return response


class ServingApi:
    """One model name over one Versions, answering as TF Serving does."""

    def __init__(self, name: str, versions: Versions, batcher: Batcher):
        self.name, self.versions, self.batcher = name, versions, batcher

    def _read_body(self) -> bytes:
        body = request.stream.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            raise invalid(ERR_BODY_SIZE.format(limit=MAX_BODY_BYTES))
        return body

    def _acquire(self, name: str, version: Optional[int]):
        served = self.versions.acquire(version) if name == self.name else None
        if served is None:
            spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise ServingError("NOT_FOUND", ERR_NOT_FOUND.format(request=spec))
        return served

    def predict(self, name: str, version: Optional[int]) -> Response:
        body, held = self._read_body(), []

        def input_types_of(signature_name: str):
            held.append(self._acquire(name, version))
            return held[0].model.input_types(signature_name)

        try:
            parsed = request_json.parse_predict(body, input_types_of)
            if parsed.batch_size > MAX_INSTANCES:
                raise invalid(ERR_TASK_SIZE.format(size=parsed.batch_size, limit=MAX_INSTANCES))
            outputs = self.batcher.submit(held[0], parsed.signature_name, parsed.inputs).result()
            return _json(response_json.predict_body(outputs, parsed.row_format), version=held[0].number)
        finally:
            for served in held:
                served.release()

    def classify_or_regress(self, name: str, version: Optional[int], method: str) -> Response:
        signature_name = request_json.parse_examples(self._read_body())
        served = self._acquire(name, version)
        try:
            count = served.model.output_count(signature_name)
        finally:
            served.release()
        if method == "classify" and count not in (1, 2):
            raise invalid(ERR_CLASSIFY_OUTPUTS.format(count=count))
        if method == "regress" and count != 1:
            raise invalid(ERR_REGRESS_OUTPUTS)
        raise ServingError("UNIMPLEMENTED", f"estimator-mnist serve answers :predict only, not :{method}")

    def status(self, name: str, version: Optional[int]) -> Response:
        states = self.versions.states(version) if name == self.name else []
        if not states:
            message = ERR_NO_VERSION.format(version=version, name=name) if version is not None else \
                ERR_NO_VERSIONS.format(name=name)
            raise ServingError("NOT_FOUND", message)
        return _json(json.dumps(response_json.status_body(states), indent=1))

    def metadata(self, name: str, version: Optional[int]) -> Response:
        served = self._acquire(name, version)
        try:
            body = response_json.metadata_body(name, served.number, served.model.signature_defs)
        finally:
            served.release()
        return _json(json.dumps(body, indent=1))

    def handle(self, method: str, path: str) -> Response:
        """HttpRestApiHandler::ProcessRequest."""
        pattern = PREDICTION_PATH if method == "POST" else STATUS_PATH if method == "GET" else None
        match = pattern.fullmatch(path) if pattern else None
        if match is None:
            raise invalid(ERR_MALFORMED.format(method=method, path=path))
        name, number, label, verb = match.groups()
        if label and (method == "POST" or verb == "metadata"):  # the status lists every version whatever the label
            raise invalid(ERR_LABEL.format(label=label))
        version = int(number) if number else None
        if method == "POST":
            return self.predict(name, version) if verb == "predict" else \
                self.classify_or_regress(name, version, verb)
        if not name:
            raise invalid(ERR_NO_MODEL_NAME)
        return self.metadata(name, version) if verb == "metadata" else self.status(name, version)

    def info(self) -> dict:
        """The product's own facts about the served version, for the page: outside Serving's paths."""
        served = self.versions.acquire()
        if served is None:
            return {"name": self.name, "version": None}
        try:
            return {"name": self.name, "version": served.number, "export": served.export_dir,
                    **evaluation_of(served.export_dir)}
        finally:
            served.release()


def create_app(api: ServingApi) -> Flask:
    app = Flask(__name__, static_folder=str(resources.files(__package__) / "static"), static_url_path="/static")

    @app.route("/")
    def page():
        return app.send_static_file("index.html")

    @app.route(INFO_PATH)
    def info():
        return _json(json.dumps(api.info()))

    @app.route("/<path:rest>", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
    def serving(rest):
        path = "/" + rest
        if not SERVING_PATH.fullmatch(path):
            return _json(error_body(f"Not found: {path}"), 404)
        try:
            if request.method == "OPTIONS":  # a CORS preflight, as Serving's dispatcher answers it
                if not re.match(r"https?://", request.headers.get("Origin", "")):
                    raise ServingError("FAILED_PRECONDITION", ERR_PREFLIGHT)
                return _json("")
            return api.handle(request.method, path)
        except ServingError as exc:
            return _json(error_body(exc.message), exc.http_status)
        except Exception as exc:  # pylint: disable=broad-except  # Serving's INTERNAL; the server goes on
            return _json(error_body(f"{type(exc).__name__}: {exc}"), 500)

    return app
