"""The bucket layer's retry: google-api-core's Retry, kept going for the whole of its bound.

google-api-core 2.29 draws each sleep at random between 0 and the current
backoff (full jitter: 0.5, 1, 2, 4 s ...) and gives up as soon as the sleep
drawn would pass the bound, so a 4 s bound could end after 0.5 s with a
RetryError, and the layer's error then named a 4 s outage that had lasted
0.5 (tests/process/test_storage_gcs.py's
test_a_storage_that_keeps_failing_is_unavailable_naming_the_object_exit_200
failed a fresh clone's CI on the Xeon). Here each sleep is cut
to the time left, so a storage that keeps failing is given up on at its bound.
"""

from __future__ import annotations

import functools
import time
import warnings
from typing import Callable, Iterator

LAST_SLEEP_SECS = 0.05  # with less than this left, the drawn sleep stands and the retry ends


def bounded_retry(predicate: Callable[[BaseException], bool], timeout: float, initial: float = 0.5,
                  maximum: float = 8.0, multiplier: float = 2.0):
    """A google.api_core Retry on `predicate` that retries for `timeout` seconds, sleeps cut to the time left."""
    return _bounded_retry_class()(predicate=predicate, initial=initial, maximum=maximum, multiplier=multiplier,
                                  timeout=timeout)


def _cut(drawn: Iterator[float], deadline: float) -> Iterator[float]:
    """Each sleep drawn, cut to the time left before `deadline` (with too little left, as drawn: the retry ends)."""
    for sleep in drawn:
        left = deadline - time.monotonic()
        yield min(sleep, left) if left > LAST_SLEEP_SECS else sleep


@functools.lru_cache(maxsize=None)
def _bounded_retry_class():
    """The Retry subclass, made once: google.api_core is imported on the first bucket call, not before."""
    with warnings.catch_warnings():  # google.api_core's FutureWarning on Python 3.11: not the user's concern
        warnings.simplefilter("ignore", FutureWarning)
        from google.api_core import retry  # pylint: disable=import-outside-toplevel

    class BoundedRetry(retry.Retry):
        def __call__(self, func, on_error=None):
            on_error = self._on_error if self._on_error is not None else on_error

            @functools.wraps(func)
            def retry_wrapped_func(*args, **kwargs):
                drawn = retry.exponential_sleep_generator(self._initial, self._maximum, multiplier=self._multiplier)
                return retry.retry_target(functools.partial(func, *args, **kwargs), self._predicate,
                                          _cut(drawn, time.monotonic() + self._timeout), timeout=self._timeout,
                                          on_error=on_error)

            return retry_wrapped_func

    return BoundedRetry
