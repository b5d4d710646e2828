"""One lock rule for every storage: flock(2) where the file system has it, else a lease. No TF.

flock is the lock on a local disk and on NFS v4: the kernel releases it when its holder dies. A bucket has no
locks, nor does a Lustre client mounted without `flock` (ENOSYS), some FUSE mounts (EOPNOTSUPP) or NFS v3
without a lock daemon (ENOLCK): there the lock is a lease, a versioned record (`read_versioned` /
`write_if_version`: a generation-matched write on a bucket, link(2) on a disk) that names its holder and a
heartbeat the holder renews every LOCK_HEARTBEAT_SECS. The rule, the same for disk and bucket:
- take: write over a released (or never made) lease, conditional on the version read: one winner;
- stale: a waiter takes over a lease whose version has not moved for LOCK_STALE_SECS of the *waiter's own*
  monotonic clock, so no two machines' clocks are ever compared (a host whose clock is 200 s ahead never
  breaks a fresh lease), and the takeover is itself a conditional write: of two waiters one wins, and a
  holder that renews meanwhile makes both lose;
- release: a conditional write of "released" over the holder's own version: a holder whose lease was taken
  over (it stalled past LOCK_STALE_SECS) changes nothing of its successor's. Nothing is ever deleted, so no
  conditional delete is needed (fake-gcs-server, the suite's GCS server, ignores those).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from typing import Callable, Iterator, Optional

from estimator_mnist import storage
from estimator_mnist.storage.bounds import LOCK_HEARTBEAT_SECS, LOCK_STALE_SECS

NO_FLOCK = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
LEASE_SUFFIX = ".lease"
POLL_SECS = 0.2
MSG_NO_FLOCK = ("warning: {path}: this file system does not support flock(2) ({reason}); using the lease "
                "{lease} instead")
MSG_TAKEN_OVER = ("warning: {path}: took over the lock of {holder}, whose heartbeat had not moved for {secs:.0f} s "
                  "(it died or hung while holding it)")
MSG_LOST = ("warning: {path}: this task's lock was taken over by another while it held it (its heartbeat could "
            "not be written for {secs:.0f} s)")


class Lease:
    """A lease on `path` (a versioned record) for one holder: take, renew, release."""

    def __init__(self, path: str, log: Callable[[str], None], clock=time.monotonic, sleep=time.sleep,
                 stale_secs: float = LOCK_STALE_SECS, beat_secs: float = LOCK_HEARTBEAT_SECS):
        self.path, self._log, self._clock, self._sleep, self._stale = path, log, clock, sleep, stale_secs
        self._beat_secs = beat_secs
        self._token = uuid.uuid4().hex
        self._version = 0
        self._beat = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _record(self, holding: bool) -> bytes:
        if not holding:
            return json.dumps({"holder": None}).encode()
        return json.dumps({"holder": self._token, "host": socket.gethostname(), "pid": os.getpid(),
                           "beat": self._beat}).encode()

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
                new = storage.write_if_version(self.path, self._record(True), version)
                if new is not None:
                    if holder is not None:
                        self._log(MSG_TAKEN_OVER.format(path=self.path, secs=self._clock() - since,
                                                        holder=f"{holder.get('host')} pid {holder.get('pid')}"))
                    self._version = new
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
        self._thread = threading.Thread(target=self._renew, name=f"lease {os.path.basename(self.path)}",
                                        daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        last = self._clock()
        while not self._stop.wait(self._beat_secs):
            self._beat += 1
            try:
                new = storage.write_if_version(self.path, self._record(True), self._version)
            except OSError:
                continue  # a storage error now: the next beat tries again; a waiter takes over only after STALE
            if new is None:
                self._log(MSG_LOST.format(path=self.path, secs=self._clock() - last))
                self._version = None
                return
            self._version, last = new, self._clock()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._beat_secs + 1)
        if self._version:  # only its own version: a successor's lease is left alone
            storage.write_if_version(self.path, self._record(False), self._version)
        self._version = 0


@contextlib.contextmanager
def _flock_or_lease(path: str, log, blocking: bool, flock, lease_factory) -> Iterator[bool]:
    flock = flock or fcntl.flock
    storage.makedirs(os.path.dirname(path) or ".")
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError as exc:
            if exc.errno not in NO_FLOCK:
                raise
            log(MSG_NO_FLOCK.format(path=path, reason=os.strerror(exc.errno), lease=path + LEASE_SUFFIX))
            with _leased(path + LEASE_SUFFIX, blocking, lease_factory) as taken:
                yield taken
            return
        try:
            yield True
        finally:
            flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _leased(path: str, blocking: bool, lease_factory) -> Iterator[bool]:
    lease = lease_factory(path)
    taken = lease.take(blocking)
    try:
        yield taken
    finally:
        if taken:
            lease.release()


@contextlib.contextmanager
def exclusive(path, log: Callable[[str], None], blocking: bool = True, flock=None,
              lease_factory=None) -> Iterator[bool]:
    """Holds the lock named `path` for the `with` block: yields True, or False when `blocking` is off and a live
    holder has it. Storage errors are raised as what they are (errors.py)."""
    path = str(path)
    lease_factory = lease_factory or (lambda where: Lease(where, log))
    if storage.is_bucket(path):
        with _leased(path + LEASE_SUFFIX, blocking, lease_factory) as taken:
            yield taken
        return
    with _flock_or_lease(path, log, blocking, flock, lease_factory) as taken:
        yield taken
