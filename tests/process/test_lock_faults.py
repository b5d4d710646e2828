"""Locks that hold when mounts fail and holders freeze, in processes of their own (tests/process/lock_holder.py)
on the suite's fault file system (tests/fault_fs: two mounts of one directory, flock passed through, NFS-like
caches) and on the GCS API server (tests/gcs_server.py).

- Two processes, one per mount, contend for one sweep trial while one mount refuses flock (ENOLCK): exactly
  one runs it, whichever comes first; the other leaves it to its holder, or stops in one line naming its mount.
- A lease holder frozen (SIGSTOP) past the stale bound, taken over, then thawed (SIGCONT): it writes nothing
  after the takeover and exits 200 with one line; the lease is its successor's.
- A LINK that made its link but answered EEXIST (NFS's retransmission): the writer knows it won.
Lease timing in these tests: a heartbeat every 0.3 s, stale after 3 s (the product's: 5 s and 40 s).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from estimator_mnist import storage
from estimator_mnist.storage import gcs, lock
from tests.fault_fs import ENOLCK, mounted, require_fuse
from tests.helpers import REPO

LEASE_ENV = {"LOCK_TEST_BEAT_SECS": "0.3", "LOCK_TEST_STALE_SECS": "3"}
WAIT_SECS = 60


class Holder:
    """tests/process/lock_holder.py running, its stdout lines read as they come."""

    def __init__(self, mode, lock_path, log, name, lines, period, env=None):
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.process.lock_holder", mode, str(lock_path), str(log), name, str(lines),
             str(period)], cwd=REPO, env={**os.environ, **LEASE_ENV, **(env or {})}, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def wait_for(self, wanted: str) -> None:
        deadline = time.monotonic() + WAIT_SECS
        while time.monotonic() < deadline:
            try:
                if self.lines.get(timeout=0.5) == wanted:
                    return
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
        pytest.fail(f"{self.name} never said {wanted!r} (exit {self.proc.poll()}): {self.proc.stderr.read()}")

    def finish(self):
        """(exit code, stderr's lines)."""
        try:
            code = self.proc.wait(WAIT_SECS)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return code, self.proc.stderr.read().strip().splitlines()


@pytest.fixture
def two_mounts(tmp_path):
    """The fault file system's two mounts of one directory (NFS-like caches of 1 s), flock refused on "b"."""
    require_fuse()
    backing = tmp_path / "backing"
    (backing / "sweep" / "trial-000").mkdir(parents=True)
    with mounted(str(backing), str(tmp_path / "a")) as first, mounted(str(backing), str(tmp_path / "b")) as second:
        second.inject("flock", "*", ENOLCK, seconds=3600)
        yield {"flock": first, "enolck": second}, backing


@pytest.mark.parametrize("first", ["flock", "enolck", "together"])
def test_two_mounts_one_refusing_flock_exactly_one_runs_the_trial(two_mounts, first):
    mounts, backing = two_mounts
    where = ("sweep", "trial-000", "trial.lock")

    def start(name):
        return Holder("trial", mounts[name].path(*where), mounts[name].path("sweep", "trial-000", "ran.log"),
                      name, 8, 0.4)

    if first == "together":
        holders = {name: start(name) for name in mounts}
    else:
        holders = {first: start(first)}
        holders[first].wait_for("holding")
        second = "enolck" if first == "flock" else "flock"
        holders[second] = start(second)
    ends = {name: holder.finish() for name, holder in holders.items()}
    ran = (backing / "sweep" / "trial-000" / "ran.log").read_text().splitlines()
    runners = {line.split()[0] for line in ran}
    assert len(runners) == 1 and len(ran) == 8, (ran, ends)  # exactly one ran it, whole
    runner = runners.pop()
    other = "enolck" if runner == "flock" else "flock"
    code, errors = ends[other]
    if runner == "flock":  # flock recorded: the mount refusing it stops, never falls back to a lease of its own
        assert code == 1 and len(errors) == 1, ends
        mount, fstype = lock.mount_of(mounts["enolck"].path(*where))
        assert mount == mounts["enolck"].mountpoint and fstype.startswith("fuse")
        assert f"this node's mount {mount} ({fstype}) refuses it (No locks available)" in errors[0]
    else:  # the lease recorded by the first holder: the flock mount follows it and finds the trial held
        assert code == 0 and errors == [] and "held by another" in holders[other].proc.stdout.read() + "".join(
            list(holders[other].lines.queue)), ends
    assert ends[runner][0] == 0
    record = json.loads(next((backing / "sweep").glob(lock.SCHEME_FILE + ".*")).read_text())
    assert record["scheme"] == (lock.FLOCK if runner == "flock" else lock.LEASE)


def _frozen_holder_is_taken_over(lock_path: str, log: str, env=None):
    """The holder writes a line every 0.3 s; frozen right after one (in its pause, not inside a write: the
    window docs/storage.md leaves open), past the stale bound; a successor takes over and writes; the holder
    is thawed. Returns (holder's exit and stderr, the log's lines, the lease's record while the successor held)."""
    holder = Holder("hold", lock_path, log, "holder", 100, 0.3, env)
    holder.wait_for("wrote 2")
    os.kill(holder.proc.pid, signal.SIGSTOP)
    try:
        successor = Holder("hold", lock_path, log, "successor", 15, 0.3, env)
        successor.wait_for("wrote 1")
    finally:
        os.kill(holder.proc.pid, signal.SIGCONT)
    ended = holder.finish()
    record = json.loads(storage.read_versioned(lock_path + lock.LEASE_SUFFIX)[0])
    assert successor.finish()[0] == 0
    return ended, storage.read_text(log).splitlines(), record, successor.proc.pid


def _assert_nothing_after_the_takeover(ended, lines, record, successor_pid):
    code, errors = ended
    assert code == 200 and len(errors) == 1, ended
    assert "this process's lock was taken over by another" in errors[0] and "writes nothing more" in errors[0]
    first = next(i for i, line in enumerate(lines) if line.startswith("successor"))
    assert not any(line.startswith("holder") for line in lines[first:]), lines
    assert [line for line in lines if line.startswith("successor")] == [f"successor {i}" for i in range(15)]
    assert record["pid"] == successor_pid  # the record is its successor's


def test_a_frozen_holder_taken_over_on_a_mount_without_flock_writes_nothing_after(two_mounts):
    mounts, _ = two_mounts
    lock_path = mounts["enolck"].path("sweep", "sweep.lock")
    with lock.exclusive(lock_path, lambda line: None):  # the directory's first holder: records the lease
        pass
    _assert_nothing_after_the_takeover(*_frozen_holder_is_taken_over(lock_path, mounts["enolck"].path(
        "sweep", "updates.log")))


def test_a_frozen_holder_taken_over_on_the_gcs_server_writes_nothing_after(gcs_bucket, gcs_env, monkeypatch):
    for key, value in gcs_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(gcs, "_clients", {})
    sweep = f"gs://{gcs_bucket}/sweep"
    _assert_nothing_after_the_takeover(*_frozen_holder_is_taken_over(f"{sweep}/sweep.lock", f"{sweep}/updates.log",
                                                                     gcs_env))


@pytest.mark.parametrize("attr_timeout", [0.0, 1.0])
def test_a_link_answered_eexist_after_it_succeeded_is_known_as_won(tmp_path, attr_timeout):
    """open(2)'s st_nlink recipe through a FUSE mount, with attributes asked every time and cached for 1 s."""
    require_fuse()
    with mounted(str(tmp_path / "backing"), str(tmp_path / "mnt"), attr_timeout=attr_timeout,
                 entry_timeout=attr_timeout) as fs:
        path = fs.path("lease")
        assert storage.write_if_version(path, b"first", 0) == 1
        fs.inject("linked", "lease.*", 17, seconds=3600)  # EEXIST after the link is made
        assert storage.write_if_version(path, b"mine", 1) == 2
        assert storage.read_versioned(path) == (b"mine", 2)
        assert storage.write_if_version(path, b"late", 1) is None  # one that lost still lost
        assert sorted(os.listdir(tmp_path / "backing")) == ["lease.1", "lease.2"]
