"""The lease's bounds agree (storage/bounds.py): a live holder whose renewals are slow never looks stale, it stops
writing before any waiter may take over, and the waits that depend on a lock outlast a takeover."""

from estimator_mnist.config import timeouts
from estimator_mnist.storage import bounds


def test_a_renewal_is_bounded_well_below_a_bucket_request_and_its_retries():
    assert bounds.LOCK_REQUEST_SECS < bounds.STORAGE_REQUEST_SECS < bounds.STORAGE_RETRY_SECS
    one_beat = bounds.LOCK_HEARTBEAT_SECS + bounds.LOCK_REQUEST_SECS  # a pause, then a renewal that ran out
    assert bounds.LOCK_STALE_SECS >= 3 * one_beat + bounds.LOCK_MARGIN_SECS


def test_the_holder_stops_before_a_waiter_may_take_over_and_not_for_one_failed_beat():
    one_beat = bounds.LOCK_HEARTBEAT_SECS + bounds.LOCK_REQUEST_SECS
    assert 2 * one_beat <= bounds.LOCK_HOLD_SECS <= bounds.LOCK_STALE_SECS - bounds.LOCK_MARGIN_SECS
    assert bounds.LOCK_MARGIN_SECS > 0


def test_the_waits_that_depend_on_a_lock_outlast_a_takeover():
    for wait in (timeouts.CHECKPOINT_REPAIR_WAIT_SECS, timeouts.SLURM_PORTS_WAIT_SECS):
        assert wait > bounds.LOCK_STALE_SECS + bounds.LOCK_HEARTBEAT_SECS


def test_every_lock_bound_has_its_row():
    names = {b.name for b in timeouts.TIMEOUTS}
    assert {"LOCK_STALE_SECS", "LOCK_HOLD_SECS", "LOCK_REQUEST_SECS", "VERSIONED_READ_SECS",
            "STORAGE_REQUEST_SECS", "STORAGE_RETRY_SECS"} <= names
