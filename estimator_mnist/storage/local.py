"""The storage layer on a local or shared POSIX file system (NFS, Lustre, a ReadWriteMany volume). No TF.

Records are replaced atomically: written whole under a unique temporary name that follows the umask, synced
where they must outlive a crash of the machine, then renamed over the old one, so that a reader on any host
sees the old record or the new one. A versioned record (the lease of lock.py) is one file per version,
`<path>.<N>`, each made with link(2), which fails when the name exists on every file system this product runs
on (NFS v3+, Lustre, CephFS): of two writers of version N+1, exactly one wins, which is what a bucket's
generation-matched write gives.

Every answer is strict (errors.py): "absent" only on ENOENT or ENOTDIR; a refusal raises StorageDenied (exit 1);
a storage that fails to serve (ESTALE, EIO, ETIMEDOUT: an NFS failover) is asked again for the storage bound
(STORAGE_RETRY_SECS, or bounds.storage_retry_secs), then StorageUnavailable (exit 200) naming the path.
`os.path.exists` and its kin answer False on any error, which took a stale handle for a missing checkpoint:
none is used here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
import uuid
from typing import Callable, List, Optional, Tuple, TypeVar

from estimator_mnist.storage.bounds import READ_RETRY_SECS, VERSIONED_READ_SECS, storage_retry_secs
from estimator_mnist.storage.errors import ERR_UNAVAILABLE, StorageUnavailable, is_absent, is_transient, named

VERSION_SEP = "."
LISTING_PAUSE_SECS = 0.1  # between two listings of a versioned record (VERSIONED_READ_SECS bounds them)
ERR_LISTING = "version {version} was listed but is gone when read: the directory's listing lags behind"


def _temporary(path: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.{uuid.uuid4().hex}.tmp")


T = TypeVar("T")
FIRST_RETRY_SECS = 0.25  # then doubled up to READ_RETRY_SECS between tries, until the storage bound


def strict(path: str, operation: Callable[[], T], sleep=time.sleep, clock=time.monotonic) -> T:
    """operation(), asked again while the storage fails to serve it, for the storage bound; its errors named."""
    bound = storage_retry_secs()
    deadline, pause = clock() + bound, FIRST_RETRY_SECS
    while True:
        try:
            return operation()
        except OSError as exc:
            if not is_transient(exc) or clock() + pause > deadline:
                raise named(exc, path, bound) from None
        sleep(pause)
        pause = min(pause * 2, READ_RETRY_SECS)


def stat_or_none(path: str) -> Optional[os.stat_result]:
    """The file's stat; None only when it is absent (ENOENT, ENOTDIR). Anything else is raised, named."""
    def look() -> Optional[os.stat_result]:
        try:
            return os.stat(path)
        except OSError as exc:
            if is_absent(exc):
                return None
            raise
    return strict(path, look)


class LocalStore:
    """Every operation of the layer on a path of the local file system; errors named by errors.py."""

    name = "local"
    atomic_move = True  # rename(2) within one file system
    flock = True  # where the mount grants it (storage/lock.py)

    def check_bucket(self, path: str) -> None:
        """Nothing to check before any task starts: a local path has no bucket and no credentials."""

    def read_bytes(self, path: str) -> bytes:
        def read() -> bytes:
            with open(path, "rb") as stream:
                return stream.read()
        return strict(path, read)

    def write_atomic(self, path: str, data: bytes, durable: bool = False) -> None:
        strict(path, lambda: self._write_atomic(path, data, durable))

    @staticmethod
    def _write_atomic(path: str, data: bytes, durable: bool) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # Not mkstemp: its mode is 0600 whatever the umask, and the file must have the mode every other file of
        # the run has (the plan's umask). The name is unique per call, not per process: two threads of one
        # process may write one file at once (tests/unit/test_storage_local.py).
        tmp = _temporary(path)
        try:
            with open(tmp, "xb") as stream:
                stream.write(data)
                if durable:
                    stream.flush()
                    os.fsync(stream.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)

    def append(self, path: str, data: bytes) -> None:
        def opened() -> int:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            # O_APPEND: each write lands whole at the end, also when two processes append (a line is one write).
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        fd = strict(path, opened)
        try:
            os.write(fd, data)  # not asked again: a write that failed may have landed, and a line counts once
        except OSError as exc:
            raise named(exc, path, 0) from None
        finally:
            os.close(fd)

    def exists(self, path: str) -> bool:
        return stat_or_none(path) is not None

    def isdir(self, path: str) -> bool:
        found = stat_or_none(path)
        return found is not None and stat.S_ISDIR(found.st_mode)

    def isfile(self, path: str) -> bool:
        found = stat_or_none(path)
        return found is not None and stat.S_ISREG(found.st_mode)

    def listdir(self, path: str) -> List[str]:
        """The names in a directory; [] when it does not exist (ENOENT, ENOTDIR), any other error named."""
        def names() -> List[str]:
            try:
                return sorted(os.listdir(path))
            except OSError as exc:
                if is_absent(exc):
                    return []
                raise
        return strict(path, names)

    def remove(self, path: str) -> None:
        strict(path, lambda: os.remove(path))

    def rmtree(self, path: str) -> None:
        if self.isdir(path):  # nothing there is nothing to remove, as on a bucket
            strict(path, lambda: shutil.rmtree(path))

    def makedirs(self, path: str) -> None:
        strict(path, lambda: os.makedirs(path, exist_ok=True))

    def move(self, src: str, dst: str) -> None:
        """A rename within one file system (atomic), a copy then a removal across two."""
        def moved() -> None:
            os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
            shutil.move(src, dst)
        strict(src, moved)

    # Versioned records: the storage-neutral compare-and-swap of lock.py.
    def _versions(self, path: str) -> List[int]:
        head, name = os.path.split(path)
        prefix = name + VERSION_SEP
        return sorted((int(entry[len(prefix):]) for entry in self.listdir(head or ".")
                       if entry.startswith(prefix) and entry[len(prefix):].isdigit()), reverse=True)

    def read_versioned(self, path: str) -> Tuple[Optional[bytes], int]:
        """The newest version's bytes and number; (None, 0) when there is none. A listed version gone by the read
        (a successor's writer removed it, or an NFS listing lagged behind) is listed again after a pause, for
        VERSIONED_READ_SECS at most; then StorageUnavailable names the record (exit 200), never a traceback."""
        deadline = time.monotonic() + VERSIONED_READ_SECS
        while True:
            versions = self._versions(path)
            if not versions:
                return None, 0
            try:
                return self.read_bytes(f"{path}{VERSION_SEP}{versions[0]}"), versions[0]
            except FileNotFoundError:
                if time.monotonic() >= deadline:
                    raise StorageUnavailable(ERR_UNAVAILABLE.format(
                        path=path, secs=VERSIONED_READ_SECS, problem=ERR_LISTING.format(
                            version=versions[0]))) from None
                time.sleep(LISTING_PAUSE_SECS)

    def write_if_version(self, path: str, data: bytes, version: int,
                         request_secs: Optional[float] = None) -> Optional[int]:
        """Writes version `version + 1` if no one has: its number, else None (another writer was first).

        Two versions stay (the newest and the one before): a writer whose listing lagged by one version finds
        the name it wants taken. After its link the writer lists once more, and a newer version than its own
        (a listing that lagged further) makes its write lost: it removes its own version and reports None.
        `request_secs` is a bucket's: a system call has no bound to give."""
        del request_secs
        new = f"{path}{VERSION_SEP}{version + 1}"
        tmp = _temporary(path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            with open(tmp, "xb") as stream:
                stream.write(data)
            try:
                os.link(tmp, new)  # EEXIST when another writer made this version first: one winner
            except FileExistsError:
                # NFS: a LINK whose answer was lost is sent again, and the server's answer to the copy is EEXIST
                # although the first made the link. open(2)'s recipe: the link count of the unique temporary
                # file is 2 exactly when the link is ours (test_versioned_records.py; test_lock_faults.py on the
                # fault file system, with and without cached attributes).
                if os.stat(tmp).st_nlink != 2:
                    return None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
        newest = self._versions(path)
        if newest and newest[0] > version + 1:
            with contextlib.suppress(OSError):
                os.remove(new)  # its own, lost: no reader should take it for the newest
            return None
        if version > 1:  # history; removing it is housekeeping only
            with contextlib.suppress(OSError):
                os.remove(f"{path}{VERSION_SEP}{version - 1}")
        return version + 1
