"""The storage layer's bounds on a wait, listed in config/timeouts.py's table (which imports them from here: the
layer sits below the config).

The lease's bounds are derived from one another so that a live holder never looks stale: its heartbeat's own
request is bounded (LOCK_REQUEST_SECS, much shorter than a bucket request's STORAGE_REQUEST_SECS and
STORAGE_RETRY_SECS, which would let one slow renewal outlast the stale bound); a waiter takes over only after
LOCK_MISSED_BEATS whole beats (a pause and a request each) went by without a renewal, plus a margin; the holder
itself stops writing LOCK_MARGIN_SECS before that, on its own clock. tests/unit/test_storage_bounds.py checks the
order, and that the waits that depend on a lock (CHECKPOINT_REPAIR_WAIT_SECS, SLURM_PORTS_WAIT_SECS) outlast a
takeover.
"""

import os

from estimator_mnist.errors import UsageError

STORAGE_RETRY_SECS = 60.0  # a bucket request failing with 5xx, 429 or a lost connection: retried for this long
STORAGE_REQUEST_SECS = 30.0  # one bucket request (connect and read) before it counts as failed and is retried
LOCK_HEARTBEAT_SECS = 5.0  # how often a holder renews its lease (a rhythm, not a bound)
LOCK_REQUEST_SECS = 5.0  # one renewal of a lease on a bucket (retries included): past it, that beat failed
LOCK_MISSED_BEATS = 3  # whole beats without a renewal before a waiter may take the lease over
LOCK_MARGIN_SECS = 10.0  # the holder stops writing this long before a waiter may take over (a write in flight)
# A lease whose holder's heartbeat has not moved for this long (waiter's own clock) is taken over: 40 s.
LOCK_STALE_SECS = LOCK_MISSED_BEATS * (LOCK_HEARTBEAT_SECS + LOCK_REQUEST_SECS) + LOCK_MARGIN_SECS
# A holder whose last renewal is this old (its own clock) writes nothing more under the lease: 30 s.
LOCK_HOLD_SECS = LOCK_STALE_SECS - LOCK_MARGIN_SECS
READ_RETRY_SECS = 2.0  # a model_dir file a disk failed to serve (EIO, ESTALE): read again after this, 3 reads in all
# A versioned record (a lease on a disk) whose listing names a version that is gone by the read (an NFS listing
# lagging behind, or a successor's writer cleaning up): listed and read again, with a pause, for this long.
VERSIONED_READ_SECS = 5.0
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
