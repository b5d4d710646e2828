"""The storage layer's bounds on a wait, listed in config/timeouts.py's table (which imports them from here: the
layer sits below the config)."""

import os

from estimator_mnist.errors import UsageError

STORAGE_RETRY_SECS = 60.0  # a bucket request failing with 5xx, 429 or a lost connection: retried for this long
STORAGE_REQUEST_SECS = 30.0  # one bucket request (connect and read) before it counts as failed and is retried
LOCK_STALE_SECS = 30.0  # a lease whose holder's heartbeat has not moved for this long (waiter's clock): taken over
LOCK_HEARTBEAT_SECS = 5.0  # how often a holder renews its lease (a rhythm, not a bound)
READ_RETRY_SECS = 2.0  # a model_dir file a disk failed to serve (EIO, ESTALE): read again after this, 3 reads in all
RETRY_SECS_ENV = "ESTIMATOR_MNIST_STORAGE_RETRY_SECS"
ERR_RETRY_SECS = ("{env}={value!r}: not a number of seconds above 0; unset it for the default "
                  "({default:g} s) or give one such as 120")


def storage_retry_secs() -> float:
    """The storage bound in force: STORAGE_RETRY_SECS, or the environment's ESTIMATOR_MNIST_STORAGE_RETRY_SECS (a
    job that must ride out a longer failover of its NFS server; the tests that prove what happens past it).
    UsageError (exit 2) naming the variable when it is no positive number."""
    text = os.environ.get(RETRY_SECS_ENV, "").strip()
    if not text:
        return STORAGE_RETRY_SECS
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise UsageError(ERR_RETRY_SECS.format(env=RETRY_SECS_ENV, value=text, default=STORAGE_RETRY_SECS))
    return value
