"""One lock rule for every storage, one scheme per directory: flock(2), or a lease (lease.py). No TF.

flock is the lock on a local disk and on NFS v4: the kernel releases it when its holder dies. A bucket has no
locks, nor does a Lustre client mounted without `flock` (ENOSYS), some FUSE mounts (EOPNOTSUPP) or NFS v3
without a lock daemon (ENOLCK): there the lock is a lease. flock and a lease never exclude each other, so the
scheme is one per directory: the first holder decides it (flock where its mount grants it, else the lease) and
records it there (SCHEME_FILE, a versioned record: one winner); every later holder, on any node, follows the
record. A node whose mount refuses flock where flock is recorded stops with one line naming the mount, never
falling back to a lease alone. A directory made before the record existed gets it from its first holder after
the upgrade; processes of an older version locking the same directory meanwhile are not supported
(docs/storage.md). On a bucket the lease is the only scheme, and nothing is recorded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
from typing import Callable, Iterator, Optional, Tuple

from estimator_mnist import storage
from estimator_mnist.errors import PermanentFailure
from estimator_mnist.storage.lease import MSG_TAKEN_OVER, POLL_SECS, Lease, LeaseLost  # noqa: F401 (the API)

NO_FLOCK = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
LEASE_SUFFIX = ".lease"
SCHEME_FILE = ".lock-scheme.json"
FLOCK, LEASE = "flock", "lease"
MSG_NO_FLOCK = ("warning: {path}: this file system does not support flock(2) ({reason}); using the lease "
                "{lease} instead, for every holder in this directory (recorded in {record})")
ERR_MOUNT_REFUSES = ("{path}: this directory's lock is flock(2) (recorded in {record} by its first holder), but "
                     "this node's mount {mount} ({fstype}) refuses it ({reason}); mount it as the other nodes do, "
                     "with locking (NFS: a lock daemon, no `nolock`; Lustre: `-o flock`), then start this task again")
ERR_BAD_RECORD = ("{record}: not a lock scheme record ({found!r}); remove it while nothing runs in {directory}, and "
                  "the next holder records the scheme again")


def _record_path(directory: str) -> str:
    return storage.join(directory, SCHEME_FILE)


def recorded_scheme(directory: str) -> Optional[str]:
    """The scheme recorded for `directory`: FLOCK, LEASE or None (not yet decided)."""
    record = _record_path(directory)
    data, _ = storage.read_versioned(record)
    if data is None:
        return None
    try:
        scheme = json.loads(data).get("scheme")
    except (ValueError, AttributeError):
        scheme = None
    if scheme not in (FLOCK, LEASE):
        raise PermanentFailure(ERR_BAD_RECORD.format(record=record, found=data[:80], directory=directory))
    return scheme


def record_scheme(directory: str, scheme: str) -> Tuple[str, bool]:
    """Records `scheme` for `directory` unless one is recorded there: (the scheme that holds, whether this call
    recorded it)."""
    record = json.dumps({"scheme": scheme, "host": socket.gethostname(), "pid": os.getpid()}).encode()
    if storage.write_if_version(_record_path(directory), record, 0) is not None:
        return scheme, True
    return recorded_scheme(directory) or scheme, False


def mount_of(path: str):
    """(mount point, file system type) of the mount holding `path`, from /proc/self/mounts."""
    point = os.path.realpath(path)
    while not os.path.ismount(point):
        point = os.path.dirname(point)
    fstype = "unknown"
    with contextlib.suppress(OSError):
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 2 and fields[1].encode().decode("unicode_escape") == point:
                    fstype = fields[2]  # the last one listed is the one on top
    return point, fstype


def _refused(path: str, directory: str, exc: OSError) -> PermanentFailure:
    mount, fstype = mount_of(path)
    return PermanentFailure(ERR_MOUNT_REFUSES.format(path=path, record=_record_path(directory), mount=mount,
                                                     fstype=fstype, reason=os.strerror(exc.errno)))


@contextlib.contextmanager
def _flock_or_lease(path: str, directory: str, log, blocking: bool, flock, lease_factory) -> Iterator[bool]:
    flock = flock or fcntl.flock
    storage.makedirs(storage.parent(path) or ".")
    scheme = recorded_scheme(directory)
    if scheme == LEASE:
        with _leased(path + LEASE_SUFFIX, blocking, lease_factory) as taken:
            yield taken
        return
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError as exc:
            if exc.errno not in NO_FLOCK:
                raise
            if scheme == FLOCK:
                raise _refused(path, directory, exc) from None
            scheme, mine = record_scheme(directory, LEASE)
            if scheme == FLOCK:
                raise _refused(path, directory, exc) from None
            if mine:  # the first holder says why; the others follow the record
                log(MSG_NO_FLOCK.format(path=path, reason=os.strerror(exc.errno), lease=path + LEASE_SUFFIX,
                                        record=_record_path(directory)))
        else:
            try:
                scheme = scheme or record_scheme(directory, FLOCK)[0]
            finally:
                if scheme != FLOCK:  # another holder recorded the lease first: this flock excludes no one
                    flock(handle, fcntl.LOCK_UN)
            if scheme == FLOCK:
                try:
                    yield True
                finally:
                    flock(handle, fcntl.LOCK_UN)
                return
    with _leased(path + LEASE_SUFFIX, blocking, lease_factory) as taken:
        yield taken


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
              lease_factory=None, scheme_dir: Optional[str] = None) -> Iterator[bool]:
    """Holds the lock named `path` for the `with` block: yields True, or False when `blocking` is off and a live
    holder has it. `scheme_dir`: the directory whose record decides the scheme (the lock's own by default; a
    sweep's trials follow the sweep directory's). Storage errors are raised as what they are (errors.py); a mount
    that refuses the directory's recorded scheme, as a PermanentFailure naming it; a write under a lease its holder may have lost, as
    LeaseLost (lease.py)."""
    path = str(path)
    lease_factory = lease_factory or (lambda where: Lease(where, log))
    if not storage.store_for(path).flock:  # a bucket: the lease is its only scheme, nothing recorded
        with _leased(path + LEASE_SUFFIX, blocking, lease_factory) as taken:
            yield taken
        return
    directory = str(scheme_dir) if scheme_dir is not None else storage.parent(path)
    with _flock_or_lease(path, directory, log, blocking, flock, lease_factory) as taken:
        yield taken
