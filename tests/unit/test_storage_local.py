"""The storage layer on a disk: atomic writes that stay whole under concurrent writers of one file, in one process
or several; tolerant reads; the versioned record (compare-and-swap) of the lease."""

import json
import os
import threading

import pytest

from estimator_mnist import storage
from estimator_mnist.storage import local


def test_threads_of_one_process_write_one_file_at_once_and_it_is_always_whole(tmp_path):
    """With a temporary name per pid, the second os.replace found the first one's temporary gone."""
    path, barrier, errors = tmp_path / "record.json", threading.Barrier(8), []

    def write(number):
        barrier.wait()
        try:
            for repeat in range(50):
                storage.write_json(path, {"writer": number, "repeat": repeat, "pad": "x" * 4000})
        except OSError as exc:  # the failure this pins
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.loads(path.read_text())["repeat"] == 49
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]  # no temporary left


def test_a_durable_write_follows_the_umask_and_a_failed_one_leaves_the_old_file_and_no_temporary(
        tmp_path, monkeypatch):
    previous = os.umask(0o027)  # the plan's PRIVATE_UMASK: the file gets the mode every file of the run gets
    try:
        path = storage.write_atomic(tmp_path / "sub" / "a.txt", "old", durable=True)
    finally:
        os.umask(previous)
    assert path.read_text() == "old" and oct(os.stat(path).st_mode & 0o777) == "0o640"

    def fail(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local.os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        storage.write_atomic(path, "new")
    assert path.read_text() == "old" and [p.name for p in path.parent.iterdir()] == ["a.txt"]


def test_read_json_is_none_for_a_missing_torn_or_non_object_file(tmp_path):
    assert storage.read_json(tmp_path / "missing") is None
    (tmp_path / "torn").write_text('{"a": ')
    assert storage.read_json(tmp_path / "torn") is None
    (tmp_path / "list").write_text("[1]")
    assert storage.read_json(tmp_path / "list") is None
    (tmp_path / "ok").write_text('{"a": 1}')
    assert storage.read_json(tmp_path / "ok") == {"a": 1}


def test_a_read_error_other_than_missing_is_named_not_taken_for_missing(tmp_path):
    """files.read_json returned None on any OSError, which a sweep's array task reported as 'not shared'."""
    folder = tmp_path / "a-directory.json"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        storage.read_json(folder)


def test_a_versioned_record_has_one_winner_per_version(tmp_path):
    path = str(tmp_path / "lease")
    assert storage.read_versioned(path) == (None, 0)
    assert storage.write_if_version(path, b"a", 0) == 1
    assert storage.write_if_version(path, b"b", 0) is None  # a second creator loses
    assert storage.read_versioned(path) == (b"a", 1)
    assert storage.write_if_version(path, b"c", 1) == 2
    assert storage.write_if_version(path, b"d", 1) is None  # a writer that read version 1 too loses
    assert storage.write_if_version(path, b"e", 2) == 3
    assert storage.read_versioned(path) == (b"e", 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lease.2", "lease.3"]  # history of one version kept


def test_of_many_threads_writing_one_version_exactly_one_wins(tmp_path):
    path, barrier, won = str(tmp_path / "lease"), threading.Barrier(8), []

    def write(number):
        barrier.wait()
        if storage.write_if_version(path, str(number).encode(), 0) is not None:
            won.append(number)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and storage.read_versioned(path) == (str(won[0]).encode(), 1)


def test_a_writer_whose_listing_lagged_finds_its_write_lost(tmp_path):
    """A stale directory listing (an NFS client's cache) shows version 1 when 4 exists: the writer's link of
    version 2 succeeds (2 was cleaned up), but its listing afterwards shows 4, so the write counts as lost."""
    path = str(tmp_path / "lease")
    for version in range(4):
        storage.write_if_version(path, b"x", version)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lease.3", "lease.4"]
    assert storage.write_if_version(path, b"late", 1) is None
    assert storage.read_versioned(path) == (b"x", 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lease.3", "lease.4"]


def test_append_lands_whole_lines_and_listdir_of_a_missing_directory_is_empty(tmp_path):
    path = tmp_path / "sub" / "lines.jsonl"
    storage.append_line(path, '{"a": 1}')
    storage.append_line(path, '{"a": 2}\n')
    assert path.read_text() == '{"a": 1}\n{"a": 2}\n'
    assert storage.listdir(tmp_path / "nothing") == [] and storage.listdir(tmp_path) == ["sub"]


def test_the_memory_bucket_keeps_the_layer_s_promises(monkeypatch):
    """tests/memory_bucket.py stands in for a bucket in unit tests: its answers are the layer's."""
    from tests import memory_bucket  # pylint: disable=import-outside-toplevel

    bucket = memory_bucket.install(monkeypatch)
    path = "gs://bkt/run/model/lease"
    assert storage.write_if_version(path, b"a", 0) is not None and storage.write_if_version(path, b"b", 0) is None
    storage.write_json("gs://bkt/run/model/progress/chief-0.json", {"task": "chief:0"})
    assert storage.listdir("gs://bkt/run/model") == ["lease", "progress"]
    assert storage.read_json("gs://bkt/run/model/progress/chief-0.json") == {"task": "chief:0"}
    assert storage.read_json("gs://bkt/run/model/missing.json") is None
    bucket.denied.add(path)
    with pytest.raises(PermissionError):
        storage.read_versioned(path)
