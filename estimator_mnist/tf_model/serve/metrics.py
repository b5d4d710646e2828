"""serve's Prometheus metrics, in the text format prometheus-client writes, at Serving's path and with Serving's
names (util/prometheus_exporter.cc writes "/tensorflow/serving/request_count" as
":tensorflow:serving:request_count", latencies in microseconds). Serving's counters are written without the
"_total" suffix that prometheus-client puts on every counter, so they are written here as untyped, under
Serving's very sample names: the queries of a Serving dashboard work unchanged (rate() takes untyped series).

- `:tensorflow:serving:request_count{model_name,status}`: every request, as
  Serving counts it, here also by `signature_name`, `API` (Predict,
  Classify, Regress, MultiInference, GetModelMetadata, GetModelStatus) and
  `entrypoint` (REST or GRPC): summed over those, Serving's series;
- `:tensorflow:serving:request_latency{model_name,API,entrypoint}`: the
  wall time of each successful request (Serving records only those);
- `:tensorflow:serving:batching_session:processed_batch_size{model_name}`
  and `...:wrapped_run_count`: the examples of each model call, the calls;
- `estimator_mnist_serve_version_state{model_name,version,state}`: 1 for
  each version's state as GET /v1/models/NAME gives it;
- `estimator_mnist_serve_refused{reason}`: requests refused by a bound,
  by its reason (REFUSAL_REASONS); no client's name or address is a label;
- `estimator_mnist_serve_draining`: 1 from SIGTERM (or Ctrl-C) on.
No TensorFlow.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from typing import Callable, Dict, Iterable, List, Tuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

PATH = "/monitoring/prometheus/metrics"  # PrometheusExporter::kPrometheusPath
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = ":tensorflow:serving:"
REQUEST_LABELS = ("model_name", "signature_name", "API", "entrypoint", "status")
LATENCY_LABELS = ("model_name", "API", "entrypoint")
# Serving's buckets: Exponential(10, 1.8, 33) microseconds (util.cc), and powers of two up to 2^14 for sizes.
LATENCY_BOUNDS = [10 * 1.8 ** i for i in range(32)]
BATCH_BOUNDS = [float(2 ** i) for i in range(15)]
# Why a request was refused before its work: too many images in it, its client's queue full, its version's
# queue full, too many large gRPC messages waiting to be read, too little time left before its deadline. A fixed
# set: no client can add a series.
REFUSAL_REASONS = ("images_per_request", "client_queue", "version_queue", "pending_bytes", "deadline")


class Histogram:
    def __init__(self, bounds: List[float]):
        self.bounds, self.counts, self.sum = bounds, [0] * (len(bounds) + 1), 0.0

    def add(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> List[Tuple[str, float]]:
        cumulative, out = 0, []
        for bound, count in zip(self.bounds + [float("inf")], self.counts):
            cumulative += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        return out


class Metrics:
    """Counts kept under one lock, written by a prometheus-client collector when the page is asked for."""

    def __init__(self, states: Callable[[], Iterable[Tuple[str, int, str]]] = lambda: (),
                 draining: Callable[[], bool] = lambda: False):
        self._states, self._draining = states, draining
        self._lock = threading.Lock()
        self._requests: Dict[tuple, int] = defaultdict(int)
        self._latency: Dict[tuple, Histogram] = {}
        self._batches: Dict[str, Histogram] = {}
        self._refused: Dict[str, int] = dict.fromkeys(REFUSAL_REASONS, 0)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def request(self, model_name: str, signature_name: str, api: str, entrypoint: str, status: str,
                seconds: float) -> None:
        with self._lock:
            self._requests[(model_name, signature_name, api, entrypoint, status)] += 1
            if status == "OK":
                key = (model_name, api, entrypoint)
                self._latency.setdefault(key, Histogram(LATENCY_BOUNDS)).add(seconds * 1e6)

    def batch(self, model_name: str, examples: int) -> None:
        with self._lock:
            self._batches.setdefault(model_name, Histogram(BATCH_BOUNDS)).add(examples)

    def refused(self, reason: str) -> None:
        with self._lock:
            self._refused[reason] += 1  # KeyError for a reason not in REFUSAL_REASONS: the page stays bounded

    def collect(self):
        with self._lock:
            refused = dict(self._refused)
            requests = dict(self._requests)
            latency = {key: (h.buckets(), h.sum) for key, h in self._latency.items()}
            batches = {key: (h.buckets(), h.sum, sum(h.counts)) for key, h in self._batches.items()}
        counter = Metric(PREFIX + "request_count", "The total number of requests.", "unknown")
        for labels, count in sorted(requests.items()):
            counter.add_sample(PREFIX + "request_count", dict(zip(REQUEST_LABELS, labels)), count)
        yield counter
        histogram = HistogramMetricFamily(
            PREFIX + "request_latency", "Distribution of wall time (in microseconds) for Tensorflow Serving request.",
            labels=LATENCY_LABELS)
        for labels, (buckets, total) in sorted(latency.items()):
            histogram.add_metric(list(labels), buckets, total)
        yield histogram
        sizes = HistogramMetricFamily(PREFIX + "batching_session:processed_batch_size",
                                      "The examples of each model call.", labels=["model_name"])
        runs = Metric(PREFIX + "batching_session:wrapped_run_count", "Total count of run calls on the model.",
                      "unknown")
        for name, (buckets, total, count) in sorted(batches.items()):
            sizes.add_metric([name], buckets, total)
            runs.add_sample(PREFIX + "batching_session:wrapped_run_count", {"model_name": name}, count)
        yield sizes
        yield runs
        states = GaugeMetricFamily("estimator_mnist_serve_version_state", "1 for each version's state.",
                                   labels=["model_name", "version", "state"])
        for name, version, state in self._states():
            states.add_metric([name, str(version), state], 1)
        yield states
        refusals = Metric("estimator_mnist_serve_refused", "Requests refused by a bound, by reason.", "unknown")
        for reason, count in refused.items():
            refusals.add_sample("estimator_mnist_serve_refused", {"reason": reason}, count)
        yield refusals
        yield GaugeMetricFamily("estimator_mnist_serve_draining", "1 once SIGTERM or Ctrl-C began the drain.",
                                value=1 if self._draining() else 0)

    def page(self) -> bytes:
        return generate_latest(self.registry)
