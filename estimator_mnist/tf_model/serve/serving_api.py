"""What REST (app.py) and gRPC (grpc_api.py) share: one model name over one Versions, its batcher, every
request's deadline, the drain, the metrics, and Serving's errors for each. No TensorFlow, no Flask, no gRPC.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import CancelledError, Future, TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from estimator_mnist.config import timeouts
from estimator_mnist.tf_model.serve.admission import (client_of, ERR_CLIENT_FULL, ERR_QUEUE_FULL, ERR_TASK_SIZE,
                                                      images_within, refusals)
from estimator_mnist.tf_model.serve.batcher import Batcher, give_up
from estimator_mnist.tf_model.serve.lifecycle import ERR_STOPPING, Lifecycle
from estimator_mnist.tf_model.serve.metrics import Metrics
from estimator_mnist.tf_model.serve.serving_errors import invalid, ServingError
from estimator_mnist.model_files.exports import evaluation_of
from estimator_mnist.tf_model.serve.versions import Version, Versions

DEADLINE_SECS = timeouts.SERVE_REQUEST_TIMEOUT_MS / 1000.0  # Serving's --rest_api_timeout_in_ms default
MAX_INSTANCES = 10000  # a request may carry MNIST's whole test set, no more
MAX_ELEMENTS = MAX_INSTANCES * 28 * 28  # and no tensor more values than that set's images

ERR_NOT_FOUND = "Servable not found for request: {request}"
ERR_NO_VERSIONS = "Could not find any versions of model {name}"
ERR_NO_VERSION = "Could not find version {version} of model {name}"
ERR_ELEMENTS = ("Tensor {name} of {count} values is larger than estimator-mnist serve's limit of {limit} "
                "(MNIST's whole test set); send fewer instances per request")
ERR_DEADLINE = ("Deadline exceeded: the request was not answered within {secs:g} s (serve's --request-timeout-ms, "
                "or the client's deadline)")
OTHER = "(other)"  # the one label value of every model name or signature that does not exist
ERR_CLASSIFY_OUTPUTS = "Expected one or two output Tensors, found {count}"  # classifier.cc
ERR_REGRESS_OUTPUTS = "Expected one output Tensor."  # regressor.cc
ERR_ONE_INPUT = "Expected one input Tensor."  # classifier.cc and regressor.cc


class ServingApi:
    """One model name over one Versions, answering as TF Serving does."""

    def __init__(self, name: str, versions: Versions, batcher: Batcher, deadline_secs: float = DEADLINE_SECS,
                 metrics: Optional[Metrics] = None, lifecycle: Optional[Lifecycle] = None,
                 max_images: int = MAX_INSTANCES, trusted_proxies: Sequence[str] = ()):
        self.name, self.versions, self.batcher, self.deadline_secs = name, versions, batcher, deadline_secs
        self.max_images, self.trusted_proxies = max_images, frozenset(trusted_proxies)
        self.lifecycle = lifecycle or Lifecycle()
        self.metrics = metrics or Metrics(self.version_states, lambda: self.lifecycle.draining)
        batcher.on_batch = lambda version, examples: self.metrics.batch(self.name, examples)

    def version_states(self) -> List[Tuple[str, int, str]]:
        """The metrics' version states: versions loading, loaded or unloading; one that ended has no series."""
        return [(self.name, number, state) for number, state, _, _ in self.states(self.name, None, missing_ok=True)
                if state != "END"]

    @contextmanager
    def request(self, api: str, entrypoint: str, model_name: str, signature_name: str = ""):
        """One request: refused once the drain refuses, counted in flight, recorded in the metrics by its
        status (Serving's RecordModelRequestCount and RecordRequestLatency)."""
        if not self.lifecycle.enter():
            self.metrics.request(*self._labels(model_name, signature_name), api, entrypoint, "UNAVAILABLE", 0.0)
            raise ServingError("UNAVAILABLE", ERR_STOPPING)
        start, status, labels = time.monotonic(), "UNKNOWN", {"signature_name": signature_name}
        try:
            yield labels  # REST learns the signature from the body: it sets labels["signature_name"]
            status = "OK"
        except ServingError as exc:
            status = exc.code
            raise
        finally:
            self.metrics.request(*self._labels(model_name, labels["signature_name"]), api, entrypoint, status,
                                 time.monotonic() - start)
            self.lifecycle.leave()

    def _labels(self, model_name: str, signature_name: str) -> Tuple[str, str]:
        """The metric labels of a request: the names a client sent only if they exist (the model's, a signature
        of a loaded version, or none), else OTHER, so that no client grows the metrics page."""
        if model_name != self.name:
            return OTHER, OTHER if signature_name else ""
        known = not signature_name or signature_name in self.versions.signature_names()
        return model_name, signature_name if known else OTHER

    def deadline(self, client_secs: Optional[float] = None) -> float:
        """The time.monotonic() by which a request is answered: the flag's, or the client's if sooner."""
        secs = self.deadline_secs if client_secs is None else min(self.deadline_secs, max(client_secs, 0.0))
        return time.monotonic() + secs

    def acquire(self, name: str, version: Optional[int]) -> Version:
        served = self.versions.acquire(version) if name == self.name else None
        if served is None:
            spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise ServingError("NOT_FOUND", ERR_NOT_FOUND.format(request=spec))
        return served

    def client_of(self, address: str, forwarded_for: str = "") -> str:
        return client_of(address, forwarded_for, self.trusted_proxies)

    def admit(self, served: Version, client: str, images: int, deadline: Optional[float] = None) -> None:
        """Serving's error for a request of `images` images (what its shape declares) that would be refused, or
        that could not be answered by `deadline`: said before its inputs are made, so that it costs no work."""
        images_within(self.metrics, images, self.max_images)
        remaining = None if deadline is None else deadline - time.monotonic()
        with refusals(self.metrics, self.batcher, served):
            self.batcher.check(served, client, images, remaining)

    def submit(self, served: Version, signature_name: str, inputs: Dict[str, np.ndarray], client: str = "") -> Future:
        """The signature's call, queued in the batcher once the inputs are within the bounds."""
        for input_name, array in inputs.items():
            images_within(self.metrics, len(array) if array.ndim else 1, self.max_images)
            if array.size > MAX_ELEMENTS:
                raise invalid(ERR_ELEMENTS.format(name=input_name, count=array.size, limit=MAX_ELEMENTS))
        with refusals(self.metrics, self.batcher, served):
            return self.batcher.submit(served, signature_name, inputs, client)

    def run(self, served: Version, signature_name: str, inputs: Dict[str, np.ndarray],
            deadline: float, client: str = "") -> Dict[str, np.ndarray]:
        """The signature's outputs from the batcher, by the deadline; DEADLINE_EXCEEDED after it, and the
        request's slot in the batch is given up (a call that hangs holds only its version's lane)."""
        future = self.submit(served, signature_name, inputs, client)
        try:
            return future.result(timeout=max(deadline - time.monotonic(), 0.0))
        except FutureTimeout:
            raise self._gave_up(future) from None
        except CancelledError:  # the batcher stopped: the process is stopping
            raise ServingError("UNAVAILABLE", ERR_STOPPING) from None

    async def run_async(self, served: Version, signature_name: str, inputs: Dict[str, np.ndarray],
                        deadline: float, client: str = "") -> Dict[str, np.ndarray]:
        """As run(), awaited on an event loop (gRPC's), which no thread waits for."""
        future = self.submit(served, signature_name, inputs, client)
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)),
                                          max(deadline - time.monotonic(), 0.0))
        except asyncio.TimeoutError:
            raise self._gave_up(future) from None
        except asyncio.CancelledError:
            if future.cancelled():
                raise ServingError("UNAVAILABLE", ERR_STOPPING) from None
            give_up(future)  # the client left: its inputs leave the queue now
            raise

    def _gave_up(self, future: Future) -> ServingError:
        give_up(future)
        return ServingError("DEADLINE_EXCEEDED", ERR_DEADLINE.format(secs=self.deadline_secs))

    def abandon(self) -> None:
        """The drain's end: every request still waiting for the model is answered UNAVAILABLE now."""
        self.batcher.abandon(ServingError("UNAVAILABLE", ERR_STOPPING))

    def check_classify_or_regress(self, served: Version, signature_name: str, method: str) -> None:
        """PreProcessClassification / PreProcessRegression on this export's predict signatures: Serving
        refuses both before it runs anything (no signature here has one output, or two)."""
        count = served.model.output_count(signature_name)
        if len(served.model.input_types(signature_name)) != 1:
            raise invalid(ERR_ONE_INPUT)
        if method == "classify" and count not in (1, 2):
            raise invalid(ERR_CLASSIFY_OUTPUTS.format(count=count))
        if method == "regress" and count != 1:
            raise invalid(ERR_REGRESS_OUTPUTS)
        raise ServingError("UNIMPLEMENTED", f"estimator-mnist serve answers Predict only, not {method}")

    def states(self, name: str, version: Optional[int], missing_ok: bool = False):
        """(version, state, error_code, error_message) of the model's versions; the served one is UNLOADING
        from the drain on, as Serving reports a version on its way out."""
        states = self.versions.states(version) if name == self.name else []
        if not states and not missing_ok:
            message = ERR_NO_VERSION.format(version=version, name=name) if version is not None else \
                ERR_NO_VERSIONS.format(name=name)
            raise ServingError("NOT_FOUND", message)
        if self.lifecycle.draining:
            states = [(n, "UNLOADING" if s == "AVAILABLE" else s, c, m) for n, s, c, m in states]
        return states

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
