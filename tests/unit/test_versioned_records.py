"""The versioned record on a disk (storage/local.py), where NFS can answer untruthfully: a LINK retransmitted after
its first answer was lost says EEXIST although the link was made; a listing lags behind the directory."""

import errno
import os
import time

import pytest

from estimator_mnist import storage
from estimator_mnist.storage import local
from estimator_mnist.storage.errors import StorageUnavailable


def _retransmitted_link(real):
    """link(2) as NFS answers a retransmitted LINK whose first copy succeeded: made, then EEXIST."""
    def link(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    return link


def test_a_link_answered_eexist_after_it_succeeded_is_known_as_won(tmp_path, monkeypatch):
    path = str(tmp_path / "lease")
    assert storage.write_if_version(path, b"a", 0) == 1
    monkeypatch.setattr(local.os, "link", _retransmitted_link(os.link))
    assert storage.write_if_version(path, b"mine", 1) == 2  # the winner knows it won
    assert storage.read_versioned(path) == (b"mine", 2)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_link_that_lost_to_another_writer_is_still_lost(tmp_path, monkeypatch):
    path = str(tmp_path / "lease")
    assert storage.write_if_version(path, b"a", 0) == 1
    assert storage.write_if_version(path, b"other", 1) == 2
    calls, real = [], os.link
    monkeypatch.setattr(local.os, "link", lambda src, dst: calls.append(dst) or real(src, dst))
    assert storage.write_if_version(path, b"late", 1) is None  # version 2 is another's: EEXIST, link count 1
    assert calls and storage.read_versioned(path) == (b"other", 2)


def test_a_listing_that_lags_is_read_again_with_a_pause_then_named_in_one_line(tmp_path, monkeypatch):
    """Every listing names version 7, which is gone: listed again after a pause, for VERSIONED_READ_SECS, then
    StorageUnavailable (exit 200) naming the record; before, 100 listings without a pause, then a
    FileNotFoundError without an errno (a traceback in the TF task)."""
    path, listings = str(tmp_path / "lease"), []
    monkeypatch.setattr(local.LocalStore, "_versions", lambda self, where: listings.append(where) or [7])
    monkeypatch.setattr(local, "VERSIONED_READ_SECS", 0.45)
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as info:
        storage.read_versioned(path)
    assert time.monotonic() - started >= 0.45
    assert 4 <= len(listings) <= 7  # one a LISTING_PAUSE_SECS (0.1 s): without a pause, thousands
    assert str(info.value).startswith(f"{path}: the storage failed to serve it for 0 s (version 7 was listed")


def test_a_version_removed_between_listing_and_read_is_found_again(tmp_path, monkeypatch):
    path = str(tmp_path / "lease")
    for version in range(3):
        storage.write_if_version(path, b"v%d" % (version + 1), version)
    real, seen = local.LocalStore._versions, []

    def lagging(self, where):
        versions = real(self, where)
        seen.append(versions)
        return [9, *versions] if len(seen) == 1 else versions  # the first listing names a version gone

    monkeypatch.setattr(local.LocalStore, "_versions", lagging)
    assert storage.read_versioned(path) == (b"v3", 3) and len(seen) == 2
