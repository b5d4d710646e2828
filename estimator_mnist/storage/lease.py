"""The lease: a lock made of a versioned record, for storage without flock(2) (a bucket, a mount refusing it). No TF.

The record (`read_versioned` / `write_if_version`: a generation-matched write on a bucket, link(2) on a disk)
names its holder, who renews it every LOCK_HEARTBEAT_SECS, each renewal bounded by LOCK_REQUEST_SECS. The rule,
the same for disk and bucket:
- take: write over a released (or never made) lease, conditional on the version read: one winner;
- stale: a waiter takes over a lease whose version has not moved for LOCK_STALE_SECS of the *waiter's own*
  monotonic clock. No two machines' clocks are ever compared: the record's `renewed` time is the holder's wall
  clock, for a reader, and the rule never looks at it (test_storage_lock.py fails if it does);
- hold: neither POSIX nor GCS can make a write conditional on another object's version, so the holder checks
  before each write under the lease's directory (storage's write guards) that its last renewal, on its own
  monotonic clock, is younger than LOCK_HOLD_SECS (LOCK_MARGIN_SECS before any waiter may take over) and that
  its heartbeat has not seen the lease taken; otherwise that write raises LeaseLost (one line, exit 200) and
  nothing more is written. Left open: one write that passed its check in time and then stalled for longer than
  the margin lands late (docs/storage.md);
- release: a conditional write of "released" over the holder's own version: a holder whose lease was taken
  over changes nothing of its successor's. Nothing is ever deleted, so no conditional delete is needed
  (fake-gcs-server, the suite's GCS server, ignores those).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Callable, Optional

from estimator_mnist import storage
from estimator_mnist.errors import RETRYABLE_NOTE, RetryableFailure
from estimator_mnist.storage.bounds import (LOCK_HEARTBEAT_SECS, LOCK_HOLD_SECS, LOCK_REQUEST_SECS,
                                            LOCK_STALE_SECS)
from estimator_mnist.storage.errors import problem_text

POLL_SECS = 0.2
MSG_TAKEN_OVER = ("warning: {path}: took over the lock of {holder}, whose heartbeat had not moved for {secs:.0f} s "
                  "(it died or hung while holding it)")
ERR_LOST = ("{path}: this process's lock was taken over by another ({why}); it writes nothing more under "
            "{directory}; {note}")
WHY_TAKEN = "its heartbeat found the lease renewed by another"
WHY_OLD = ("its last renewal is {age:.0f} s old on this process's clock, past LOCK_HOLD_SECS={hold:g} s (a pause of "
           "the process, or a storage that failed to serve the renewals{problem})")


class LeaseLost(RetryableFailure):
    """A holder that may have lost its lease tried to write under it: nothing was written (exit 200)."""


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


class Lease:
    """A lease on `path` (a versioned record) for one holder: take, renew, guard its writes, release."""

    def __init__(self, path: str, log: Callable[[str], None], clock=time.monotonic, sleep=time.sleep,
                 stale_secs: float = LOCK_STALE_SECS, beat_secs: float = LOCK_HEARTBEAT_SECS,
                 hold_secs: Optional[float] = None, wall=time.time):
        self.path, self._log, self._clock, self._sleep, self._stale = path, log, clock, sleep, stale_secs
        self._beat_secs, self._wall = beat_secs, wall
        self._hold = hold_secs if hold_secs is not None else stale_secs * LOCK_HOLD_SECS / LOCK_STALE_SECS
        self.directory = storage.parent(path)
        self._token = uuid.uuid4().hex
        self._version = 0
        self._beat = 0
        self._renewed = 0.0  # this process's monotonic time of the last successful take or renewal
        self._lost: Optional[str] = None  # why the heartbeat knows the lease is gone
        self._problem: Optional[str] = None  # the last renewal's failure
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _record(self, holding: bool) -> bytes:
        if not holding:
            return json.dumps({"holder": None}).encode()
        return json.dumps({"holder": self._token, "host": socket.gethostname(), "pid": os.getpid(),
                           "beat": self._beat, "renewed": self._wall()}).encode()

    @staticmethod
    def _holder(data: Optional[bytes]) -> Optional[dict]:
        """The holder a lease names; None when it is released, never made or unreadable (a torn local write
        is impossible: versions are made whole, so unreadable means written by something else)."""
        try:
            record = json.loads(data) if data else None
        except ValueError:
            return None
        return record if isinstance(record, dict) and record.get("holder") else None

    def take(self, blocking: bool = True) -> bool:
        """Takes the lease: True. Not `blocking`: False once a live holder is seen renewing it (within a
        heartbeat or two), where a blocking take waits for its release or its staleness."""
        seen = since = None
        while True:
            data, version = storage.read_versioned(self.path)
            holder = self._holder(data)
            stale = seen == version and self._clock() - since >= self._stale
            if holder is None or stale:
                started = self._clock()
                new = storage.write_if_version(self.path, self._record(True), version)
                if new is not None:
                    if holder is not None:
                        self._log(MSG_TAKEN_OVER.format(path=self.path, secs=self._clock() - since,
                                                        holder=f"{holder.get('host')} pid {holder.get('pid')}"))
                    self._version, self._renewed, self._lost = new, started, None
                    self._start_heartbeat()
                    return True
                continue  # another writer was first: look again
            if seen != version:
                if seen is not None and not blocking:
                    return False  # its holder renewed it: alive
                seen, since = version, self._clock()
            self._sleep(POLL_SECS)

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew, name=f"lease {storage.basename(self.path)}",
                                        daemon=True)
        self._thread.start()
        storage.guard_writes(self.check)

    def _renew(self) -> None:
        """Every beat, a renewal bounded by LOCK_REQUEST_SECS. Any error is kept for the holder's line and the next
        beat tries again (the holder stops writing once its last renewal is too old); a renewal refused because
        another's version is there ends the heartbeat: the lease is gone."""
        while not self._stop.wait(self._beat_secs):
            self._beat += 1
            started = self._clock()  # a renewal counts from before its request: the waiter saw it no earlier
            try:
                new = storage.write_if_version(self.path, self._record(True), self._version,
                                               request_secs=LOCK_REQUEST_SECS)
            except Exception as exc:  # pylint: disable=broad-except  # every error: named, never the thread's end
                self._problem = problem_text(exc)
                continue
            if new is None:
                self._lost = WHY_TAKEN
                return
            self._version, self._renewed, self._problem = new, started, None

    def check(self, path: str) -> None:
        """Raises LeaseLost before a write under the lease's directory when the lease may be another's."""
        if not _under(str(path), self.directory):
            return
        why = self._lost
        age = self._clock() - self._renewed
        if why is None and age >= self._hold:
            why = WHY_OLD.format(age=age, hold=self._hold, problem=f"; last: {self._problem}" if self._problem else "")
        if why is not None:
            raise LeaseLost(ERR_LOST.format(path=self.path, why=why, directory=self.directory, note=RETRYABLE_NOTE))

    def release(self) -> None:
        storage.unguard_writes(self.check)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._beat_secs + LOCK_REQUEST_SECS + 1)
        if self._version and self._lost is None:  # only its own version: a successor's lease is left alone
            storage.write_if_version(self.path, self._record(False), self._version, request_secs=LOCK_REQUEST_SECS)
        self._version = 0
