"""The storage layer's contract (estimator_mnist/storage/store.py's Store protocol), run against every store: the
local disk, the suite's fault file system (a real FUSE mount, tests/fault_fs/), the in-memory bucket
(tests/memory_bucket.py) and the GCS API server (tests/gcs_server.py) through google-cloud-storage.

Above all: "absent" only when the storage says so. A refused stat, listing or read raises StorageDenied, one
that fails to serve raises StorageUnavailable after the storage bound, on each store that can be made to fail;
none of them ever answers False, [] or None for it."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Callable, Optional

import pytest

from estimator_mnist.storage import gcs
from estimator_mnist.storage.bounds import RETRY_SECS_ENV
from estimator_mnist.storage.errors import StorageDenied, StorageUnavailable
from estimator_mnist.storage.local import LocalStore
from estimator_mnist.storage.store import Store
from tests.fault_fs import mounted, require_fuse
from tests.memory_bucket import MemoryBucketStore

BOUND_SECS = 1.0  # the storage bound of a disk in these tests (a bucket's is gcs.RETRY_SECS, patched below)


@dataclass
class Subject:
    store: Store
    root: str
    atomic_move: bool
    deny: Optional[Callable[[str], None]] = None  # makes every access to a path refused
    fail: Optional[Callable[[str], None]] = None  # makes every access to a path fail to be served


def _local(tmp_path, request):
    del request
    return Subject(LocalStore(), str(tmp_path / "root"), True)


def _fault_fs(tmp_path, request):
    require_fuse()
    fs = request.getfixturevalue("_fault_mount")
    rel = "root/{}"

    def deny(path):
        fs.inject("all", rel.format(path[len(fs.path("root")) + 1:]), errno.EACCES, seconds=60)

    def fail(path):
        fs.inject("all", rel.format(path[len(fs.path("root")) + 1:]), errno.ESTALE, seconds=60)

    return Subject(LocalStore(), fs.path("root"), True, deny, fail)


def _memory(tmp_path, request):
    del tmp_path, request
    bucket = MemoryBucketStore()
    return Subject(bucket, "gs://bucket/root", False, bucket.denied.add,
                   lambda path: bucket.failing.__setitem__(path, 10 ** 6))


def _gcs(tmp_path, request):
    del tmp_path
    name = request.getfixturevalue("gcs_bucket")
    env = request.getfixturevalue("gcs_env")
    monkeypatch = request.getfixturevalue("monkeypatch")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(gcs, "_clients", {})
    monkeypatch.setattr(gcs, "RETRY_SECS", 2.0)
    proxy = request.getfixturevalue("gcs_server").proxy
    prefix = f"gs://{name}/"
    return Subject(gcs.GcsStore(), f"gs://{name}/root", False,
                   lambda path: proxy.inject(403, times=10 ** 6, name=path[len(prefix):]),
                   lambda path: proxy.inject(503, times=10 ** 6, name=path[len(prefix):]))


STORES = {"local": _local, "fault_fs": _fault_fs, "memory": _memory, "gcs": _gcs}


@pytest.fixture
def _fault_mount(tmp_path):
    with mounted(str(tmp_path / "backing"), str(tmp_path / "mnt"), attr_timeout=0, entry_timeout=0) as fs:
        yield fs


@pytest.fixture(params=sorted(STORES))
def subject(request, tmp_path, monkeypatch) -> Subject:
    monkeypatch.setenv(RETRY_SECS_ENV, str(BOUND_SECS))
    return STORES[request.param](tmp_path, request)


# Root reads any file, so the local disk cannot refuse or fail here: the fault file system is the disk that does.
@pytest.fixture(params=sorted(set(STORES) - {"local"}))
def failing(request, tmp_path, monkeypatch) -> Subject:
    monkeypatch.setenv(RETRY_SECS_ENV, str(BOUND_SECS))
    return STORES[request.param](tmp_path, request)


def _join(*parts):
    return "/".join(parts)


def test_each_store_keeps_the_protocol_and_says_whether_it_moves_atomically(subject):
    assert isinstance(subject.store, Store)
    assert subject.store.atomic_move is subject.atomic_move


def test_absent_is_false_empty_or_file_not_found_and_nothing_else(subject):
    store, missing = subject.store, _join(subject.root, "missing")
    assert not store.exists(missing) and not store.isfile(missing) and not store.isdir(missing)
    assert store.listdir(missing) == [] and store.read_versioned(missing) == (None, 0)
    with pytest.raises(FileNotFoundError):
        store.read_bytes(missing)
    with pytest.raises(FileNotFoundError):
        store.remove(missing)
    store.rmtree(missing)  # nothing there is nothing to remove


def test_records_are_written_whole_appended_listed_moved_and_removed(subject):
    store, root = subject.store, subject.root
    store.write_atomic(_join(root, "a", "record.json"), b"{}\n")
    store.append(_join(root, "a", "lines"), b"1\n")
    store.append(_join(root, "a", "lines"), b"2\n")
    assert store.read_bytes(_join(root, "a", "record.json")) == b"{}\n"
    assert store.read_bytes(_join(root, "a", "lines")) == b"1\n2\n"
    assert store.listdir(root) == ["a"] and store.listdir(_join(root, "a")) == ["lines", "record.json"]
    assert store.isdir(_join(root, "a")) and store.isfile(_join(root, "a", "lines"))
    assert not store.isfile(_join(root, "a")) and not store.isdir(_join(root, "a", "lines"))
    store.move(_join(root, "a"), _join(root, "b", "a"))
    assert store.listdir(_join(root, "b", "a")) == ["lines", "record.json"] and not store.exists(_join(root, "a"))
    store.remove(_join(root, "b", "a", "lines"))
    store.rmtree(_join(root, "b"))
    assert store.listdir(root) == []


def test_a_versioned_record_has_one_winner_per_version(subject):
    store, path = subject.store, _join(subject.root, "lease")
    store.makedirs(subject.root)
    first = store.write_if_version(path, b"a", 0)
    assert first and store.write_if_version(path, b"b", 0) is None
    assert store.read_versioned(path) == (b"a", first)


def _every_look_raises(store, path, error):
    for look in (store.exists, store.isfile, store.isdir, store.listdir, store.read_bytes):
        with pytest.raises(error):
            look(path)


def test_a_refused_stat_listing_or_read_is_denied_never_absent(failing):
    store, path = failing.store, _join(failing.root, "d", "checkpoint")
    store.write_atomic(path, b"state\n")
    failing.deny(path)
    _every_look_raises(store, path, StorageDenied)


def test_a_stat_listing_or_read_that_fails_to_be_served_is_unavailable_never_absent(failing):
    store, path = failing.store, _join(failing.root, "d", "checkpoint")
    store.write_atomic(path, b"state\n")
    failing.fail(path)
    _every_look_raises(store, path, StorageUnavailable)
