"""The storage layer's bounds on a wait, listed in config/timeouts.py's table (which imports them from here: the
layer sits below the config)."""

STORAGE_RETRY_SECS = 60.0  # a bucket request failing with 5xx, 429 or a lost connection: retried for this long
STORAGE_REQUEST_SECS = 30.0  # one bucket request (connect and read) before it counts as failed and is retried
LOCK_STALE_SECS = 30.0  # a lease whose holder's heartbeat has not moved for this long (waiter's clock): taken over
LOCK_HEARTBEAT_SECS = 5.0  # how often a holder renews its lease (a rhythm, not a bound)
READ_RETRY_SECS = 2.0  # a model_dir file a disk failed to serve (EIO, ESTALE): read again after this, 3 reads in all
