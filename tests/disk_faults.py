"""A disk's errors for unit tests, injected below the local store (its module's `open`), so that what is tested
is the store's own telling of absent, refused and unavailable apart. The real kernel paths are the fault file
system's (tests/fault_fs/)."""

from __future__ import annotations

import builtins
import os

from estimator_mnist.storage import local
from estimator_mnist.storage.bounds import RETRY_SECS_ENV


def failing_opens(monkeypatch, path: str, errors: list, forever: bool = False) -> None:
    """The local store's opens of `path` raise `errors` one by one (`forever`: a single one again and again),
    then open the file."""
    def failing_open(where, *args, **kwargs):
        if where == path and errors:
            raise errors[0] if forever and len(errors) == 1 else errors.pop(0)
        return builtins.open(where, *args, **kwargs)

    monkeypatch.setattr(local, "open", failing_open, raising=False)


def failing_stats(monkeypatch, path: str, error: OSError) -> None:
    """Every stat of `path` raises `error` (a stale NFS handle, an I/O error); other paths are stat'ed."""
    real_stat = os.stat

    def stat(where, *args, **kwargs):
        if os.fspath(where) == path:
            raise error
        return real_stat(where, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)


def short_storage_bound(monkeypatch, secs: float = 1.0) -> float:
    """The storage bound for this test: a failing disk is asked again for `secs`, not STORAGE_RETRY_SECS."""
    monkeypatch.setenv(RETRY_SECS_ENV, str(secs))
    return secs
