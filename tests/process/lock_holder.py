"""A lock holder in a process of its own, for test_lock_faults.py: it takes the storage layer's lock as the product
does and writes lines under it, so a test can freeze it (SIGSTOP), let another take over, and thaw it.

usage: python -m tests.process.lock_holder MODE LOCK LOG NAME LINES PERIOD
- MODE "hold": storage.lock.exclusive(LOCK), blocking (a sweep's sweep.lock, model_dir's check lock);
  MODE "trial": sweep/shared.trial_lock(LOCK's directory), not blocking, as a Slurm array task takes its trial.
- Under the lock: LINES lines "NAME i" appended to LOG through the storage layer, PERIOD seconds apart, each
  followed by "wrote i" on stdout. "held by another" on stdout when a trial is another's.
- LOCK_TEST_BEAT_SECS and LOCK_TEST_STALE_SECS set the lease's rhythm and stale bound (the product's: 5 s, 40 s).
Errors end it as the CLI ends a command: one line on stderr, exit 2, 1 or 200 (errors.py).
"""

from __future__ import annotations

import functools
import os
import sys
import time

from estimator_mnist import storage
from estimator_mnist.errors import PermanentFailure, RetryableFailure, UsageError
from estimator_mnist.storage import lock
from estimator_mnist.sweep import shared


def _say(line: str) -> None:
    print(line, flush=True)


def _write_lines(log: str, name: str, lines: int, period: float) -> None:
    _say("holding")
    for number in range(lines):
        storage.append_line(log, f"{name} {number}")
        _say(f"wrote {number}")
        time.sleep(period)


def run(mode: str, path: str, log: str, name: str, lines: int, period: float) -> int:
    beat, stale = os.environ.get("LOCK_TEST_BEAT_SECS"), os.environ.get("LOCK_TEST_STALE_SECS")
    if beat and stale:
        lock.Lease = functools.partial(lock.Lease, beat_secs=float(beat), stale_secs=float(stale))
    warn = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if mode == "hold":
        with lock.exclusive(path, warn):
            _write_lines(log, name, lines, period)
        return 0
    with shared.trial_lock(storage.parent(path), log=warn) as mine:
        if not mine:
            _say("held by another")
            return 0
        _write_lines(log, name, lines, period)
    return 0


def main(argv) -> int:
    mode, path, log, name, lines, period = argv
    try:
        return run(mode, path, log, name, int(lines), float(period))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RetryableFailure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 200
    except PermanentFailure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
