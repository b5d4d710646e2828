"""What a store is: the interface every store of the layer keeps (local.py, gcs.py, and the tests' in-memory
bucket), written down as a typing.Protocol and checked against each by tests/process/test_store_contract.py.
No TF.

Answers are strict on every store: "absent" (False, [], None, FileNotFoundError) only when the storage says so
(ENOENT or ENOTDIR on a disk, 404 on a bucket); a refusal raises StorageDenied (exit 1), a storage that failed
to serve within the storage bound StorageUnavailable (exit 200), each naming the path (errors.py).
"""

from __future__ import annotations

from typing import List, Optional, Protocol, Tuple, runtime_checkable


@runtime_checkable
class Store(Protocol):
    """One kind of storage, addressed by path (a local path, or a gs:// URL)."""

    name: str
    # `move` is one atomic rename (a reader sees the old name or the new one, a directory moves whole): true on
    # one POSIX file system, false on a bucket (copy then delete, object by object), as TensorFlow's
    # file_io.has_atomic_move answers. export.publish asks it instead of guessing from the path's scheme.
    atomic_move: bool
    # Its files take flock(2) (where the mount grants it; else the lease, storage/lock.py): a disk's do, a
    # bucket's objects do not, and the lease is the only lock there.
    flock: bool

    def check_bucket(self, path: str) -> None:
        """The preflight before any task starts: the bucket exists and the credentials reach it (nothing on a
        disk); one line otherwise (errors.py)."""

    def read_bytes(self, path: str) -> bytes:
        """The whole file; FileNotFoundError when it is absent."""

    def write_atomic(self, path: str, data: bytes, durable: bool = False) -> None:
        """Replaces the file whole: a reader sees the old bytes or the new, never part; its directory is made."""

    def append(self, path: str, data: bytes) -> None:
        """Adds whole lines at the end (made if absent); two appenders lose none of each other's lines."""

    def exists(self, path: str) -> bool:
        """A file or a directory is there; False only on a confirmed absence."""

    def isdir(self, path: str) -> bool:
        """A directory (on a bucket: a prefix with objects below it) is there."""

    def isfile(self, path: str) -> bool:
        """A file (on a bucket: an object) is there."""

    def listdir(self, path: str) -> List[str]:
        """The names directly below `path`, sorted; [] when it is absent."""

    def remove(self, path: str) -> None:
        """Removes one file; FileNotFoundError when it is absent."""

    def rmtree(self, path: str) -> None:
        """Removes a directory and all below it; nothing when it is absent."""

    def makedirs(self, path: str) -> None:
        """Makes a directory and its parents (nothing to make on a bucket)."""

    def move(self, src: str, dst: str) -> None:
        """Moves a file or a directory; atomic only where `atomic_move` says so."""

    def read_versioned(self, path: str) -> Tuple[Optional[bytes], int]:
        """The newest version's bytes and number; (None, 0) when there is none."""

    def write_if_version(self, path: str, data: bytes, version: int,
                         request_secs: Optional[float] = None) -> Optional[int]:
        """Writes version `version + 1` if no one has: its number, else None (another writer was first).
        `request_secs`: the whole write's bound where the store can give one (a lease's heartbeat)."""
