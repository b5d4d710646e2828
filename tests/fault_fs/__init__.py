"""The suite's own FUSE file system that fails the way NFS does: a passthrough over a backing directory, run in
a process of its own, that fails chosen operations on chosen paths with a chosen errno for a chosen time.

    from tests.fault_fs import mounted, ESTALE

    with mounted(backing_dir, mountpoint, attr_timeout=1.0, entry_timeout=1.0) as fs:
        fs.inject("stat", "model/model.ckpt-200*", ESTALE, seconds=10)   # glob relative to the mount's root
        fs.inject("read", "model/*", errno.EIO, seconds=30)
        fs.lag_listing("model")          # readdir of model/ answers the listing of the call before
        fs.clear()                       # every rule and lag off
        fs.failed()                      # how many operations the rules failed so far

- Operations (tests/fault_fs/operations.py, OPERATIONS): "stat" (lookup and getattr), "open" (open, create,
  opendir), "read", "write", "list" (readdir), "flock", "rename" (rename, link), "remove", "mkdir", "fsync",
  "linked" (a link made, then answered with the errno: a retransmitted LINK), or "all". The glob is fnmatch's, on the path relative to the mount's root ('' is the root itself).
- `inject` returns once the rule is in force; its seconds run from then.
- Caching: attr_timeout and entry_timeout are the kernel's (NFS's actimeo): a cached attribute is not asked
  again, so a "stat" rule hits a file only once its attributes expire; 0 asks every time.
- flock passes through (FUSE_FLOCK_LOCKS): two mounts of one backing directory exclude each other
  (tests/process/test_fault_fs.py proves it). LOCK_UN is through when flock() returns; a close is not: the
  kernel sends FUSE's RELEASE after close() returns, so another mount may see the lock held a moment longer.
  POSIX (fcntl/lockf) locks stay each mount's own.
- The mount goes away when the `with` ends, also on an exception or a pytest timeout's exception:
  `fusermount3 -u -z`, then the process is waited for and killed by PID if it lingers. The process also
  exits when the test process dies (PR_SET_PDEATHSIG).
- `require_fuse()` skips a test where FUSE cannot work (no /dev/fuse, no fusermount3); under CI=1 it
  installs Debian's fuse3 (tests/system_packages.py) and fails instead of skipping.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator, Optional

ESTALE, EIO, EACCES, ENOLCK = errno.ESTALE, errno.EIO, errno.EACCES, errno.ENOLCK
MOUNT_TIMEOUT_SECS = 20.0
EXIT_WAIT_SECS = 10.0
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FaultFSError(RuntimeError):
    """The fault file system could not mount, or refused a rule."""


def fuse_missing() -> str:
    """Why FUSE cannot be mounted here, or ''."""
    if not os.path.exists("/dev/fuse"):
        return "needs /dev/fuse (the fuse kernel module)"
    if not shutil.which("fusermount3"):
        return "needs Debian's fuse3 (fusermount3) and libfuse3"
    return ""


def require_fuse() -> None:
    """Skips a test that needs the fault file system where it cannot mount; fails it under CI=1."""
    import pytest  # pylint: disable=import-outside-toplevel

    from tests.system_packages import install_debian_packages  # pylint: disable=import-outside-toplevel

    reason = install_debian_packages(["fuse3", "libfuse3-3"]) or fuse_missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; in CI this is a failure, not a skip")
        pytest.skip(reason)


def _is_mount(path: str) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        return any(line.split()[4] == target for line in mounts)


class FaultFS:
    """A mounted fault file system: its rules are set through the control socket of its process."""

    def __init__(self, backing: str, mountpoint: str, process: subprocess.Popen, control: str, log: str):
        self.backing, self.mountpoint, self.process = backing, mountpoint, process
        self._control, self._log = control, log

    def _send(self, command: dict) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(self._control)
            with sock.makefile("rw", encoding="utf-8") as stream:
                stream.write(json.dumps(command) + "\n")
                stream.flush()
                answer = stream.readline().strip()
        if answer != "ok" and not answer.startswith("ok "):
            raise FaultFSError(f"fault file system refused {command}: {answer or 'no answer'}")
        return answer[3:]

    def inject(self, op: str, glob: str, errno_value: int, seconds: float) -> None:
        """Fails `op` on paths matching `glob` with `errno_value` for `seconds` from now."""
        self._send({"cmd": "inject", "op": op, "glob": glob, "errno": errno_value, "seconds": seconds})

    def lag_listing(self, glob: str, on: bool = True) -> None:
        """readdir of directories matching `glob` answers the listing of the call before (one version behind)."""
        self._send({"cmd": "lag", "glob": glob, "on": on})

    def clear(self) -> None:
        self._send({"cmd": "clear"})

    def failed(self) -> int:
        """How many operations the rules have failed so far: proof that a test's fault was met."""
        return int(self._send({"cmd": "failed"}))

    def log(self) -> str:
        with open(self._log, encoding="utf-8", errors="replace") as stream:
            return stream.read()

    def path(self, *parts: str) -> str:
        return os.path.join(self.mountpoint, *parts)


def _start(backing: str, mountpoint: str, attr_timeout: float, entry_timeout: float, work: str) -> FaultFS:
    control, log = os.path.join(work, "control.sock"), os.path.join(work, "fs.log")
    with open(log, "wb") as log_stream:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.fault_fs.server", backing, mountpoint, control, str(attr_timeout),
             str(entry_timeout)], cwd=REPO, stdout=log_stream, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    fs = FaultFS(backing, mountpoint, process, control, log)
    deadline = time.monotonic() + MOUNT_TIMEOUT_SECS
    while not (_is_mount(mountpoint) and os.path.exists(control)):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(fs)
            raise FaultFSError(f"fault file system did not mount {mountpoint} within {MOUNT_TIMEOUT_SECS:g} s "
                               f"(exit {process.poll()}): {fs.log()[-2000:]}")
        time.sleep(0.05)
    return fs


def _stop(fs: FaultFS) -> None:
    """Unmounts (lazily: a task may still hold a file open there) and ends the process, by its PID."""
    if _is_mount(fs.mountpoint):
        subprocess.run(["fusermount3", "-u", "-z", fs.mountpoint], capture_output=True, timeout=30)
    try:
        fs.process.wait(EXIT_WAIT_SECS)
    except subprocess.TimeoutExpired:
        fs.process.kill()
        fs.process.wait(EXIT_WAIT_SECS)
    if _is_mount(fs.mountpoint):  # a killed process leaves its mount dead (ENOTCONN) until unmounted
        subprocess.run(["fusermount3", "-u", "-z", fs.mountpoint], capture_output=True, timeout=30)


@contextlib.contextmanager
def mounted(backing: str, mountpoint: str, attr_timeout: float = 1.0, entry_timeout: float = 1.0,
            work: Optional[str] = None) -> Iterator[FaultFS]:
    """Mounts `backing` at `mountpoint` (both made if missing) for the `with` block, and always unmounts."""
    os.makedirs(backing, exist_ok=True)
    os.makedirs(mountpoint, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="faultfs-", dir=work) as control_dir:
        fs = _start(backing, mountpoint, attr_timeout, entry_timeout, control_dir)
        try:
            yield fs
        finally:
            _stop(fs)
