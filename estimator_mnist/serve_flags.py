"""`estimator-mnist serve`'s flags: the model, REST and gRPC, batching, the limits, the deadline, the drain
(docs/serving.md). No TensorFlow."""

from __future__ import annotations

import argparse

from estimator_mnist.config import timeouts
from estimator_mnist.flag_types import milliseconds, model_name, port, port_or_off, positive, seconds

MAX_BODY_BYTES = 10 * 1024 * 1024
MAX_QUEUED_IMAGES = 20000  # batcher.MAX_QUEUED_IMAGES (that module imports numpy: not here, before the checks)
MAX_IMAGES_PER_REQUEST = 10000  # MNIST's whole test set in one Predict
MAX_CLIENT_IMAGES = 10000  # one client's queued images: its largest request, and half the queue for the others
SWITCH_INTERVAL_MS = 1.0  # the GIL's, measured (docs/serving.md "The GIL")
GRPC_MAX_MESSAGE_BYTES = 32 * 1024 * 1024  # MNIST's whole test set as float32 (31.4 MB) fits in one Predict


def add_serve_command(add, command, model_flag) -> None:
    p = add("serve", command, "answer TensorFlow Serving's REST and gRPC APIs with the newest export, picking up "
            "newer ones live, and show a page at / to draw digits on")
    model_flag(p, "served")
    p.add_argument("--port", type=port, default=8501, help="default 8501, as TF Serving's REST port")
    p.add_argument("--grpc-port", type=port_or_off, default=8500, metavar="N",
                   help="TF Serving's gRPC API (PredictionService, ModelService) on this port; default 8500, as TF "
                        "Serving's; 0: none")
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only); 0.0.0.0 lets "
                                                       "anyone who reaches the ports use the model")
    p.add_argument("--name", type=model_name, default="mnist", help="the model's name in /v1/models/NAME")
    p.add_argument("--max-batch-size", type=positive, default=64, metavar="N",
                   help="at most this many images of concurrent requests share one model call (default 64)")
    p.add_argument("--batch-timeout-ms", type=milliseconds, default=2.0, metavar="MS",
                   help="how long a request waits for others to share its model call (default 2)")
    p.add_argument("--poll-secs", type=float, default=1.0, help=argparse.SUPPRESS)  # how often to look for exports
    p.add_argument("--request-timeout-ms", type=positive, default=timeouts.SERVE_REQUEST_TIMEOUT_MS, metavar="MS",
                   help="every request's deadline (a gRPC client's own, if sooner); default 30000, as TF Serving's "
                        "--rest_api_timeout_in_ms")
    p.add_argument("--max-queued-images", type=positive, default=MAX_QUEUED_IMAGES, metavar="N",
                   help="each version's queue holds at most this many images not yet answered; beyond, REST 503 and "
                        "gRPC RESOURCE_EXHAUSTED (default 20000: two requests of MNIST's whole test set)")
    p.add_argument("--max-images-per-request", type=positive, default=MAX_IMAGES_PER_REQUEST, metavar="N",
                   help="a request whose input's shape declares more images is refused (INVALID_ARGUMENT, 400) "
                        "before anything is made of it (default 10000: MNIST's whole test set)")
    p.add_argument("--max-client-images", type=positive, default=MAX_CLIENT_IMAGES, metavar="N",
                   help="one client (a source address) holds at most this many queued images; beyond, that "
                        "client alone gets RESOURCE_EXHAUSTED (REST 429) (default 10000)")
    p.add_argument("--trusted-proxy", action="append", metavar="ADDRESS",
                   help="a load balancer's address whose X-Forwarded-For names the client (repeatable); without "
                        "it, every user behind a proxy is one client")
    p.add_argument("--switch-interval-ms", type=milliseconds, default=SWITCH_INTERVAL_MS,
                   help=argparse.SUPPRESS)  # the GIL's switch interval: for benchmarks/serve_abuse.py's measurement
    p.add_argument("--max-body-bytes", type=positive, default=MAX_BODY_BYTES, metavar="N",
                   help="the largest REST body; a larger one is refused before it is read (default 10 MiB)")
    p.add_argument("--grpc-max-message-bytes", type=positive, default=GRPC_MAX_MESSAGE_BYTES, metavar="N",
                   help="the largest gRPC message, either way (default 32 MiB: MNIST's test set as floats fits)")
    p.add_argument("--drain-delay-secs", type=seconds, default=timeouts.SERVE_DRAIN_DELAY_SECS, metavar="S",
                   help="on SIGTERM or Ctrl-C: not ready at once, but new requests still answered this long while "
                        "load balancers notice (default 5)")
    p.add_argument("--drain-secs", type=seconds, default=timeouts.SERVE_DRAIN_SECS, metavar="S",
                   help="then new requests refused, those in flight given at most this long (default 15); the "
                        "process exits within delay + drain + 3 s (23 s with the defaults)")
    p.add_argument("--enable-cors", action="store_true",
                   help="add TF Serving's CORS headers to every REST answer, as its --enable_cors_support does")
