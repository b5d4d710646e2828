"""The HTTP app: TensorFlow Serving's REST API under /v1/, its metrics page, the product's own
/estimator-mnist/model and /estimator-mnist/ready, and the page.

Paths are matched with Serving's own regular expressions
(model_servers/http_rest_api_util.cc), methods dispatched as its
HttpRestApiHandler::ProcessRequest does, and every failure answered with
its status code and `{"error": ...}` body; with `cors`, every answer of
/v1/ carries the headers Serving's --enable_cors_support adds
(http_server.cc, AddCORSHeaders). Once the drain refuses new requests,
each answer is 503 (http_server.py closes its connection). No TensorFlow:
the versions, their models and the batcher come in from server.py.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Optional

from flask import Flask, g, request, Response

from estimator_mnist.tf_model.serve import metrics as metrics_module, request_json, response_json
from estimator_mnist.tf_model.serve.serving_api import ServingApi
from estimator_mnist.tf_model.serve.serving_errors import error_body, invalid, ServingError

__all__ = ["create_app", "ServingApi", "INFO_PATH", "READY_PATH"]

PREDICTION_PATH = re.compile(
    r"(?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)")
STATUS_PATH = re.compile(r"(?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:\/(metadata))?")
SERVING_PATH = re.compile(r"(?i)/v1/.*")
INFO_PATH = "/estimator-mnist/model"
READY_PATH = "/estimator-mnist/ready"
CORS_HEADERS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "POST, GET",
                "Access-Control-Allow-Headers": "Content-Type"}
API_OF_VERB = {"predict": "Predict", "classify": "Classify", "regress": "Regress"}

ERR_PREFLIGHT = "Origin header is missing in CORS preflight"
ERR_MALFORMED = "Malformed request: {method} {path}"
ERR_NO_MODEL_NAME = "Missing model name in request."
ERR_LABEL = "Unrecognized servable version label: {label}"
ERR_BODY_SIZE = ("Request body is larger than {limit} bytes, the limit of estimator-mnist serve (--max-body-bytes); "
                 "send fewer instances per request")


def _json(body: str, status: int = 200, version: Optional[int] = None) -> Response:
    response = Response(body, status=status, mimetype="application/json")
    if version is not None:  # which version answered, for the page; Serving's bodies keep their fields
        response.headers["X-Model-Version"] = str(version)
    return response


class RestApi:
    """HttpRestApiHandler over the shared ServingApi."""

    def __init__(self, api: ServingApi, max_body_bytes: int):
        self.api, self.max_body_bytes = api, max_body_bytes

    def _read_body(self) -> bytes:
        body = request.stream.read(self.max_body_bytes + 1)
        if len(body) > self.max_body_bytes:
            raise invalid(ERR_BODY_SIZE.format(limit=self.max_body_bytes))
        return body

    def predict(self, name: str, version: Optional[int]) -> Response:
        body, held = self._read_body(), []
        deadline = self.api.deadline()

        def input_types_of(signature_name: str):
            held.append(self.api.acquire(name, version))
            return held[0].model.input_types(signature_name)

        try:
            parsed = request_json.parse_predict(body, input_types_of)
            g.labels["signature_name"] = parsed.signature_name
            client = self.api.client_of(request.remote_addr or "", request.headers.get("X-Forwarded-For", ""))
            outputs = self.api.run(held[0], parsed.signature_name, parsed.inputs, deadline, client)
            return _json(response_json.predict_body(outputs, parsed.row_format), version=held[0].number)
        finally:
            for served in held:
                served.release()

    def classify_or_regress(self, name: str, version: Optional[int], method: str) -> Response:
        signature_name = request_json.parse_examples(self._read_body())
        served = self.api.acquire(name, version)
        try:
            self.api.check_classify_or_regress(served, signature_name, method)
        finally:
            served.release()
        raise AssertionError("unreachable: check_classify_or_regress always raises")

    def status(self, name: str, version: Optional[int]) -> Response:
        return _json(json.dumps(response_json.status_body(self.api.states(name, version)), indent=1))

    def metadata(self, name: str, version: Optional[int]) -> Response:
        served = self.api.acquire(name, version)
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

    def answer(self, path: str) -> Response:
        """One request under /v1/, counted in flight and in the metrics, with Serving's error bodies."""
        match = PREDICTION_PATH.fullmatch(path) or STATUS_PATH.fullmatch(path)
        name, verb = (match.group(1) or "", match.group(4)) if match else ("", None)
        api = API_OF_VERB.get(verb or "", "GetModelMetadata" if verb == "metadata" else "GetModelStatus")
        try:
            with self.api.request(api, "REST", name) as labels:
                g.labels = labels
                if request.method == "OPTIONS":  # a CORS preflight, as Serving's dispatcher answers it
                    if not re.match(r"https?://", request.headers.get("Origin", "")):
                        raise ServingError("FAILED_PRECONDITION", ERR_PREFLIGHT)
                    return _json("")
                return self.handle(request.method, path)
        except ServingError as exc:
            return _json(error_body(exc.message), exc.http_status)
        except Exception as exc:  # pylint: disable=broad-except  # Serving's INTERNAL; the server goes on
            return _json(error_body(f"{type(exc).__name__}: {exc}"), 500)


def create_app(api: ServingApi, max_body_bytes: int, cors: bool = False) -> Flask:
    """`max_body_bytes`: serve's --max-body-bytes (its default is serve_flags.MAX_BODY_BYTES)."""
    app = Flask(__name__, static_folder=str(resources.files(__package__) / "static"), static_url_path="/static")
    rest = RestApi(api, max_body_bytes)

    @app.route("/")
    def page():
        return app.send_static_file("index.html")

    @app.route(INFO_PATH)
    def info():
        return _json(json.dumps(api.info()))

    @app.route(READY_PATH)
    def ready():
        """For a readiness probe: 503 from the drain's start on, and while no version is served yet."""
        served = api.versions.acquire()
        if served is not None:
            served.release()
        ok = api.lifecycle.ready and served is not None
        return _json(json.dumps({"ready": ok, "draining": api.lifecycle.draining}), 200 if ok else 503)

    @app.route(metrics_module.PATH)
    def prometheus():
        return Response(api.metrics.page(), mimetype=None, content_type=metrics_module.CONTENT_TYPE)

    @app.route("/<path:rest_of_path>", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
    def serving(rest_of_path):
        path = "/" + rest_of_path
        if not SERVING_PATH.fullmatch(path):
            return _json(error_body(f"Not found: {path}"), 404)
        response = rest.answer(path)
        if cors:
            response.headers.update(CORS_HEADERS)
        return response

    return app
