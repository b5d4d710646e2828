"""TensorFlow Serving's gRPC API: `tensorflow.serving.PredictionService` and `ModelService`, on the message and
service definitions `tensorflow-serving-api` ships, over the same ServingApi as REST.

Each method follows Serving 2.15's implementation, with its status codes
and messages: Predict (servables/tensorflow/predict_util.cc: an unknown
signature is FAILED_PRECONDITION, inputs are checked by count, alias and
FromProto, an output_filter by alias), GetModelMetadata
(get_model_metadata_impl.cc), GetModelStatus (get_model_status_impl.cc),
Classify and Regress (classifier.cc, regressor.cc: these predict
signatures have three outputs, which both refuse as INVALID_ARGUMENT),
MultiInference (multi_inference.cc). The deadline is the client's, or the
server's if sooner.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Callable, Optional

import grpc
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2, model_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc)

from estimator_mnist.tf_model.serve.grpc_codec import Codec, REQUEST_IMAGES
from estimator_mnist.tf_model.serve.response_wire import predict_response_bytes
from estimator_mnist.tf_model.serve.request_json import DEFAULT_SIGNATURE
from estimator_mnist.tf_model.serve.serving_api import ServingApi
from estimator_mnist.tf_model.serve.serving_errors import CODE_NAMES, invalid, ServingError
from estimator_mnist.tf_model.serve.tensor_protos import to_array

ERR_NO_SPEC = "Missing ModelSpec"
ERR_NO_NAME = "ModelSpec has no name specified."
ERR_LABEL = "Unrecognized servable version label: {label}"
ERR_SIGNATURE_KEY = 'Serving signature key "{name}" not found.'
ERR_INPUT_SIZE = ("input size does not match signature: {given}!={expected} len({{{given_names}}}) != "
                  "len({{{expected_names}}}). Sent extra: {{{extra}}}. Missing but required: {{{missing}}}.")
ERR_INPUT_ALIAS = "input tensor alias not found in signature: {alias}. Inputs expected to be in the set {{{names}}}."
ERR_OUTPUT_ALIAS = "output tensor alias not found in signature: {alias} Outputs expected to be in the set {{{names}}}."
ERR_OUTPUT_TWICE = "duplicate output tensor alias: {alias}"
ERR_NO_FIELD = "GetModelMetadataRequest must specify at least one metadata_field"
ERR_FIELD = "Metadata field {field} is not supported"
ERR_EMPTY_NAME = "Found ModelSpec with an empty model name."
ERR_SAME_NAME = "All ModelSpecs in a MultiInferenceRequest must access the same model name."
ERR_TWICE = "Duplicate evaluation of signature: {name}"
ERR_TASK_SIGNATURE = "Requested signature not found in model graph: {name}"
ERR_METHOD = "Unsupported signature method_name: {method}"
ERR_RELOAD = ("estimator-mnist serve takes no model config: it serves the newest export of its --model path, "
              "polled every second")
# A request refused for a full queue, or as too late for its deadline, is answered after this (at most its
# deadline): a client keeping 8 requests in flight and sending another on each refusal would otherwise send
# thousands a second, each received and parsed on the loop (300 Predicts of 200 images with a 50 ms deadline at once,
# every second: a refusal at once freed the stream for the next upload; in 6 s serve read 142-220 MB of requests, and
# 123-130 MB with the refusal held; Xeon family 6 model 207, two runs each).
REFUSAL_DELAY_SECS = 0.5
REFUSALS_HELD = ("RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED")
METHODS = {"tensorflow/serving/classify": "classify", "tensorflow/serving/regress": "regress"}
STATE_VALUES = get_model_status_pb2.ModelVersionStatus.State
CODE_VALUES = {name: number for number, name in CODE_NAMES.items()}


def _version(spec) -> Optional[int]:
    """ServerCore::ServableRequestFromModelSpec."""
    if not spec.name:
        raise invalid(ERR_NO_NAME)
    if spec.WhichOneof("version_choice") == "version_label":
        raise invalid(ERR_LABEL.format(label=spec.version_label))
    return spec.version.value if spec.HasField("version") else None


def declared_images(request) -> int:
    """The images a PredictRequest's inputs declare (their shapes' first dimension; a scalar is one), read
    before any of them is made into an array: what the request costs, whatever its size in bytes."""
    images = 0
    for proto in request.inputs.values():
        dims = proto.tensor_shape.dim
        images = max(images, dims[0].size if len(dims) else 1)
    return images


def peer_address(peer: str) -> str:
    """grpc's peer ("ipv4:127.0.0.2:51234", "ipv6:[::1]:51234") without its port: the client's address."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:rest.find("]")]
    return rest.rpartition(":")[0] if kind == "ipv4" else peer


def _names(names) -> str:
    return ",".join(sorted(names))


class Handler:
    """Runs one RPC inside ServingApi.request (drain, metrics) and turns a ServingError into its gRPC status.
    The servicers are coroutines on grpc.aio's event loop (grpc_server.py): a request waiting for the model holds
    no thread."""

    def __init__(self, api: ServingApi, codec: Codec):
        self.api, self.codec = api, codec

    async def call(self, context, method: str, spec, work: Callable[[], object]):
        try:
            with self.api.request(method, "GRPC", spec.name, spec.signature_name):
                answer = work()
                return await answer if inspect.isawaitable(answer) else answer
        except ServingError as exc:
            code, message = getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN), exc.message
            if exc.code in REFUSALS_HELD:  # a client that retries at once waits first: no flood of refusals
                remaining = context.time_remaining()
                await asyncio.sleep(REFUSAL_DELAY_SECS if remaining is None else
                                    min(REFUSAL_DELAY_SECS, max(remaining, 0.0)))
        except Exception as exc:  # pylint: disable=broad-except  # Serving's INTERNAL; the server goes on
            code, message = grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"
        await context.abort(code, message)
        return None

    def deadline(self, context) -> float:
        return self.api.deadline(context.time_remaining())

    def client(self, context) -> str:
        """The client: the peer's address, or a --trusted-proxy's X-Forwarded-For."""
        forwarded = [value for key, value in (context.invocation_metadata() or ()) if key == "x-forwarded-for"]
        return self.api.client_of(peer_address(context.peer()), forwarded[-1] if forwarded else "")


def _checked_inputs(request, types: dict) -> dict:
    """VerifyRequestInputsSize, then GetInputValues: every alias known, every proto parsed, of its dtype."""
    given, expected = set(request.inputs), set(types)
    if len(given) != len(expected):
        raise invalid(ERR_INPUT_SIZE.format(given=len(given), expected=len(expected), given_names=_names(given),
                                            expected_names=_names(expected), extra=_names(given - expected),
                                            missing=_names(expected - given)))
    arrays = {}
    for index, alias in enumerate(sorted(given)):
        if alias not in types:
            raise invalid(ERR_INPUT_ALIAS.format(alias=alias, names=_names(expected)))
        arrays[alias] = to_array(request.inputs[alias], alias, types_pb2.DataType.Value(types[alias]), index)
    return arrays


def _output_names(request, outputs) -> list:
    seen = []
    for alias in request.output_filter:
        if alias not in outputs:
            raise invalid(ERR_OUTPUT_ALIAS.format(alias=alias, names=_names(outputs)))
        if alias in seen:
            raise invalid(ERR_OUTPUT_TWICE.format(alias=alias))
        seen.append(alias)
    return seen or sorted(outputs)


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer, Handler):
    async def Predict(self, request, context):
        return await self.call(context, "Predict", request.model_spec, lambda: self._predict(request, context))

    async def _predict(self, request, context):
        if not request.HasField("model_spec"):
            raise invalid(ERR_NO_SPEC)
        deadline, spec = self.deadline(context), request.model_spec
        served = self.api.acquire(spec.name, _version(spec))
        try:
            signature = spec.signature_name or DEFAULT_SIGNATURE
            definition = served.model.signature_defs.get(signature)
            if definition is None:
                raise ServingError("FAILED_PRECONDITION", ERR_SIGNATURE_KEY.format(name=signature))
            client, images = self.client(context), declared_images(request)
            self.api.admit(served, client, images, deadline)  # refused before any array is made of it
            REQUEST_IMAGES.set(images)  # a request of many images has its inputs and answer made off the loop
            arrays = await self.codec.offload(_checked_inputs, request, served.model.input_types(signature))
            names = _output_names(request, definition.get("outputs", {}))
            outputs = await self.api.run_async(served, signature, arrays, deadline, client)
            del arrays  # the model has them no more: nor does this coroutine while the answer is written
            return await self.codec.offload(predict_response_bytes, spec.name, signature, served.number,
                                            {name: outputs[name] for name in names})
        finally:
            served.release()

    def _classify_or_regress(self, request, method: str):
        if not request.HasField("model_spec"):
            raise invalid(ERR_NO_SPEC)
        spec = request.model_spec
        served = self.api.acquire(spec.name, _version(spec))
        try:
            self.api.check_classify_or_regress(served, spec.signature_name, method)
        finally:
            served.release()

    async def Classify(self, request, context):
        return await self.call(context, "Classify", request.model_spec,
                         lambda: self._classify_or_regress(request, "classify"))

    async def Regress(self, request, context):
        return await self.call(context, "Regress", request.model_spec, lambda: self._classify_or_regress(request, "regress"))

    def _multi_inference(self, request):
        spec = request.tasks[0].model_spec if request.tasks else model_pb2.ModelSpec()
        served = self.api.acquire(spec.name, _version(spec))  # GetServableHandle comes first
        try:
            model_name, signatures = "", set()
            for task in request.tasks:
                if not task.model_spec.name:
                    raise invalid(ERR_EMPTY_NAME)
                if model_name and task.model_spec.name != model_name:
                    raise invalid(ERR_SAME_NAME)
                model_name = task.model_spec.name
                signature = task.model_spec.signature_name or DEFAULT_SIGNATURE
                if signature in signatures:
                    raise invalid(ERR_TWICE.format(name=signature))
                signatures.add(signature)
                if signature not in served.model.signature_defs:
                    raise invalid(ERR_TASK_SIGNATURE.format(name=signature))
                if task.method_name not in METHODS:
                    raise ServingError("UNIMPLEMENTED", ERR_METHOD.format(method=task.method_name))
                self.api.check_classify_or_regress(served, signature, METHODS[task.method_name])
        finally:
            served.release()

    async def MultiInference(self, request, context):
        spec = request.tasks[0].model_spec if request.tasks else model_pb2.ModelSpec()
        return await self.call(context, "MultiInference", spec, lambda: self._multi_inference(request))

    def _metadata(self, request):
        if not request.HasField("model_spec"):
            raise invalid(ERR_NO_SPEC)
        if not request.metadata_field:
            raise invalid(ERR_NO_FIELD)
        for field in request.metadata_field:
            if field != "signature_def":
                raise invalid(ERR_FIELD.format(field=field))
        spec = request.model_spec
        served = self.api.acquire(spec.name, _version(spec))
        try:
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = spec.name
            response.model_spec.version.value = served.number
            signatures = get_model_metadata_pb2.SignatureDefMap()
            for name, definition in served.model.signature_protos.items():
                signatures.signature_def[name].CopyFrom(definition)
            response.metadata["signature_def"].Pack(signatures)
            return response
        finally:
            served.release()

    async def GetModelMetadata(self, request, context):
        return await self.call(context, "GetModelMetadata", request.model_spec, lambda: self._metadata(request))


class ModelService(model_service_pb2_grpc.ModelServiceServicer, Handler):
    def _status(self, request):
        if not request.HasField("model_spec"):
            raise invalid(ERR_NO_SPEC)
        spec = request.model_spec
        version = spec.version.value if spec.HasField("version") else None
        response = get_model_status_pb2.GetModelStatusResponse()
        for number, state, code, message in sorted(self.api.states(spec.name, version), key=lambda s: -s[0]):
            entry = response.model_version_status.add(version=number, state=STATE_VALUES.Value(state))
            entry.status.error_code = CODE_VALUES.get(code, 0)
            entry.status.error_message = message
        return response

    async def GetModelStatus(self, request, context):
        return await self.call(context, "GetModelStatus", request.model_spec, lambda: self._status(request))

    async def HandleReloadConfigRequest(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, ERR_RELOAD)


def add_services(server, api: ServingApi, codec: Codec) -> None:
    """Both services on a grpc.aio server, their messages read and written by `codec` (grpc_codec.py)."""
    codec.on_refused = api.metrics.refused
    codec.add(server, {"PredictionService": PredictionService(api, codec), "ModelService": ModelService(api, codec)})
