"""Who a request's client is, and Serving's error for a request a bound refuses before its work, counted in the
metrics by reason (never by client). No TensorFlow."""

from __future__ import annotations

from contextlib import contextmanager
from typing import FrozenSet

from estimator_mnist.tf_model.serve.batcher import ClientFull, QueueFull, TooLate
from estimator_mnist.tf_model.serve.serving_errors import invalid, ServingError

ERR_TASK_SIZE = ("Task size {size} is larger than maximum input batch size {limit}"  # TensorFlow's batching text
                 " (estimator-mnist serve's --max-images-per-request): send fewer images per request")
ERR_QUEUE_FULL = ("The batch queue of version {version} holds {images} images already (serve's --max-queued-images): "
                  "retry later, or send this request to another replica")
ERR_TOO_LATE = ("Deadline exceeded before the request was run: this client's {images} images queued and in it need "
                "about {ms:.0f} ms of model time even at the model's best pace, more than the {left:.0f} ms its "
                "deadline leaves: allow a longer deadline, or send fewer images at once")
ERR_CLIENT_FULL = ("This client holds {images} queued images already (serve's --max-client-images): wait for its "
                   "answers before sending more")


def client_of(address: str, forwarded_for: str, trusted_proxies: FrozenSet[str]) -> str:
    """A request's client: its source address, or, from a --trusted-proxy, the address that proxy put last in
    X-Forwarded-For (the one it saw; those before it are the client's own word)."""
    if address in trusted_proxies and forwarded_for.strip():
        return forwarded_for.split(",")[-1].strip()
    return address


def images_within(metrics, images: int, limit: int) -> None:
    """INVALID_ARGUMENT (REST 400) naming --max-images-per-request for a request of more images."""
    if images > limit:
        metrics.refused("images_per_request")
        raise invalid(ERR_TASK_SIZE.format(size=images, limit=limit))


@contextmanager
def refusals(metrics, batcher, served):
    """The batcher's refusals as Serving's errors: the client's own cap RESOURCE_EXHAUSTED (429), the version's
    queue RESOURCE_EXHAUSTED with 503 (a full queue is this replica's overload, which a load balancer retries
    elsewhere on 503, as it does for Serving's own full batch queue, UNAVAILABLE); a request that could not be
    answered by its deadline DEADLINE_EXCEEDED at once, as it would be at its deadline."""
    try:
        yield
    except ClientFull:
        metrics.refused("client_queue")
        raise ServingError("RESOURCE_EXHAUSTED", ERR_CLIENT_FULL.format(images=batcher.max_client_images)) from None
    except TooLate as exc:
        metrics.refused("deadline")
        raise ServingError("DEADLINE_EXCEEDED", ERR_TOO_LATE.format(images=exc.images, ms=exc.secs * 1000,
                                                                   left=exc.left * 1000)) from None
    except QueueFull:
        metrics.refused("version_queue")
        raise ServingError("RESOURCE_EXHAUSTED", ERR_QUEUE_FULL.format(
            version=served.number, images=batcher.max_queued_images), http_status=503) from None
