"""The storage layer: every read and write of model_dir (and of what else other processes read), on a local or
shared file system and on a bucket (gs://) alike. No TensorFlow.

TensorFlow writes its own files (checkpoints, events, exports) through its file systems; everything the product
itself keeps that another process, pod or later start reads goes through here: the restart budget and its last
good copy, preemption marks, progress records, evaluations, checkpoint-repair records, sweep records, locks.
One small interface (store.py's Store protocol) over two stores (local.py, gcs.py), chosen by the path; errors are told apart the same way
for both (errors.py); the lock rule is lock.py's, once for both. What is atomic:
- `write_atomic`: a reader sees the old record or the new one, never part of one (a rename on disk; every
  object upload on a bucket);
- `read_versioned` / `write_if_version`: a compare-and-swap, one winner among writers of one version (link(2)
  on disk, `if_generation_match` on a bucket);
- `append`: whole lines (O_APPEND on disk; a generation-matched rewrite on a bucket);
- `move`: a rename on one file system; a copy then a delete on a bucket (not atomic, as GCS itself).
"""

from __future__ import annotations

import json
from typing import Callable, List, Optional, Tuple

from estimator_mnist.storage.local import LocalStore
from estimator_mnist.storage.urls import basename, is_bucket, join, parent

_LOCAL = LocalStore()
_GCS = None
# Checks run before every write of the layer (but a lease's own): each held lease's (lease.py), which raises
# LeaseLost when its holder may have lost it and the path is under its directory.
_WRITE_GUARDS: List[Callable[[str], None]] = []


def guard_writes(check: Callable[[str], None]) -> None:
    _WRITE_GUARDS.append(check)


def unguard_writes(check: Callable[[str], None]) -> None:
    if check in _WRITE_GUARDS:
        _WRITE_GUARDS.remove(check)


def _guarded(path) -> str:
    for check in list(_WRITE_GUARDS):
        check(str(path))
    return str(path)


def store_for(path):
    """The store that holds `path`."""
    global _GCS  # pylint: disable=global-statement
    if is_bucket(str(path)):
        if _GCS is None:
            from estimator_mnist.storage.gcs import GcsStore  # pylint: disable=import-outside-toplevel
            _GCS = GcsStore()
        return _GCS
    return _LOCAL


def check_bucket(path) -> None:
    """Preflight of a gs:// model_dir before any task starts (nothing for a local path): the bucket exists and
    this process has credentials for it, else one line: StorageUsageError (exit 2) for no bucket or no usable
    credentials, StorageDenied (exit 1) naming the URL when access is refused. It reaches the server that
    TensorFlow's gs:// file system and the rest of the layer reach (STORAGE_EMULATOR_HOST included)."""
    store_for(path).check_bucket(str(path))  # the scheme resolved once: by store_for


def read_bytes(path) -> bytes:
    return store_for(path).read_bytes(str(path))


def read_text(path) -> str:
    return read_bytes(path).decode("utf-8")


def read_json(path) -> Optional[dict]:
    """The JSON object in `path`; None when it is missing or not a JSON object (a record cut short by a writer
    that wrote in place). Any other failure to read is raised, named as what it is (errors.py)."""
    try:
        value = json.loads(read_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def write_atomic(path, data, durable: bool = False):
    """Replaces `path` whole (text is written as UTF-8); `durable`: on stable storage before it replaces the
    old one (a record that must outlive a crash of the machine)."""
    store_for(path).write_atomic(_guarded(path), data.encode("utf-8") if isinstance(data, str) else data, durable)
    return path


def write_json(path, record, indent: Optional[int] = None, durable: bool = False):
    return write_atomic(path, json.dumps(record, indent=indent) + "\n", durable)


def append_line(path, line: str) -> None:
    store_for(path).append(_guarded(path), (line.rstrip("\n") + "\n").encode("utf-8"))


def exists(path) -> bool:
    return store_for(path).exists(str(path))


def isfile(path) -> bool:
    return store_for(path).isfile(str(path))


def isdir(path) -> bool:
    return store_for(path).isdir(str(path))


def listdir(path) -> List[str]:
    """The names directly below `path`, sorted; [] when there is nothing."""
    return store_for(path).listdir(str(path))


def remove(path, missing_ok: bool = True) -> None:
    try:
        store_for(path).remove(_guarded(path))
    except FileNotFoundError:
        if not missing_ok:
            raise


def rmtree(path) -> None:
    store_for(path).rmtree(_guarded(path))


def makedirs(path) -> None:
    store_for(path).makedirs(str(path))


def move(src, dst) -> None:
    _guarded(src)
    store_for(src).move(str(src), _guarded(dst))


def has_atomic_move(path) -> bool:
    """Whether a move below `path` is one atomic rename (store.py): asked of the store, as TensorFlow's
    file_io.has_atomic_move asks its file system, never guessed from the scheme."""
    return bool(store_for(path).atomic_move)


def read_versioned(path) -> Tuple[Optional[bytes], int]:
    return store_for(path).read_versioned(str(path))


def write_if_version(path, data: bytes, version: int, request_secs: Optional[float] = None) -> Optional[int]:
    """The compare-and-swap (a lease's own write: no write guard). `request_secs`: the whole write's bound on a
    bucket, retries included (a heartbeat's LOCK_REQUEST_SECS), instead of the layer's own."""
    return store_for(path).write_if_version(str(path), data, version, request_secs=request_secs)


__all__ = ["append_line", "basename", "check_bucket", "exists", "guard_writes", "has_atomic_move", "is_bucket", "isdir",
           "isfile", "join", "listdir", "makedirs", "unguard_writes",
           "move", "parent", "read_bytes", "read_json", "read_text", "read_versioned", "remove", "rmtree",
           "store_for", "write_atomic", "write_if_version", "write_json"]
