"""files.py: atomic writes that stay whole under concurrent writers of one file, in one process or several."""

import json
import os
import threading

import pytest

from estimator_mnist import files


def test_threads_of_one_process_write_one_file_at_once_and_it_is_always_whole(tmp_path):
    """With a temporary name per pid, the second os.replace found the first one's temporary gone."""
    path, barrier, errors = tmp_path / "record.json", threading.Barrier(8), []

    def write(number):
        barrier.wait()
        try:
            for repeat in range(50):
                files.write_json_atomic(path, {"writer": number, "repeat": repeat, "pad": "x" * 4000})
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
        path = files.write_text_atomic(tmp_path / "sub" / "a.txt", "old", durable=True)
    finally:
        os.umask(previous)
    assert path.read_text() == "old" and oct(os.stat(path).st_mode & 0o777) == "0o640"

    def fail(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        files.write_text_atomic(path, "new")
    assert path.read_text() == "old" and [p.name for p in path.parent.iterdir()] == ["a.txt"]


def test_read_json_is_none_for_a_missing_torn_or_non_object_file(tmp_path):
    assert files.read_json(tmp_path / "missing") is None
    (tmp_path / "torn").write_text('{"a": ')
    assert files.read_json(tmp_path / "torn") is None
    (tmp_path / "list").write_text("[1]")
    assert files.read_json(tmp_path / "list") is None
    (tmp_path / "ok").write_text('{"a": 1}')
    assert files.read_json(tmp_path / "ok") == {"a": 1}
