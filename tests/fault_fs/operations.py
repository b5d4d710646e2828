"""The fault file system's operations: a passthrough over a backing directory (mfusepy's high-level API on
libfuse3) that fails chosen operations on chosen paths with chosen errnos for a chosen time, and can list a
directory one version behind. Runs in its own process (tests/fault_fs/server.py); tests steer it through
tests/fault_fs/__init__.py.

flock is passed through (libfuse3 asks the kernel for FUSE_FLOCK_LOCKS when the operation exists): each open
of the mount holds its own descriptor of the backing file, so flock on two mounts of one backing directory
excludes as on one disk. Without it the kernel would lock each mount's inode by itself and two mounts would
never exclude each other."""

from __future__ import annotations

import errno
import fcntl
import fnmatch
import os
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

import mfusepy

# The operations a rule can name, and the libfuse callbacks each covers. "stat" is every attribute look-up
# (lookup and getattr: the kernel's stat, and its path walk to a file); "list" is readdir.
OPERATIONS = {
    "stat": ("getattr",), "open": ("open", "create", "opendir"), "read": ("read",), "write": ("write",),
    "list": ("readdir",), "flock": ("flock",), "rename": ("rename",), "remove": ("unlink", "rmdir"),
    "mkdir": ("mkdir",), "fsync": ("fsync", "flush"),
    # A link made, then answered with the rule's errno: NFS's answer to a retransmitted LINK whose first copy
    # succeeded (EEXIST), which the lock issue's st_nlink check must see through.
    "linked": ("linked",),
}


@dataclass(frozen=True)
class Rule:
    """Fail `op` on paths matching `glob` (relative to the mount's root, '' for the root) with `errno_value`
    until the monotonic time `until`."""
    op: str
    glob: str
    errno_value: int
    until: float


class Faults:
    """The rules in force, and the listings kept for a lagging readdir. Thread-safe: libfuse calls from many
    threads while the control thread adds rules."""

    def __init__(self):
        self._lock = threading.Lock()
        self._rules: List[Rule] = []
        self._lag_globs: List[str] = []
        self._last_listing: Dict[str, List[str]] = {}
        self.failed = 0  # the operations failed so far: a test proves its fault was met

    def add(self, op: str, glob: str, errno_value: int, seconds: float) -> None:
        if op not in OPERATIONS and op != "all":
            raise ValueError(f"unknown operation {op!r}; one of {sorted(OPERATIONS)} or 'all'")
        with self._lock:
            self._rules.append(Rule(op, glob, errno_value, time.monotonic() + seconds))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._lag_globs.clear()

    def lag(self, glob: str, on: bool) -> None:
        with self._lock:
            if on:
                self._lag_globs.append(glob)
            else:
                self._lag_globs = [g for g in self._lag_globs if g != glob]

    def check(self, callback: str, path: str) -> None:
        """Raises the errno of the first rule in force for this callback and path."""
        rel = path.lstrip("/")
        now = time.monotonic()
        with self._lock:
            self._rules = [rule for rule in self._rules if rule.until > now]
            for rule in self._rules:
                if (rule.op == "all" or callback in OPERATIONS[rule.op]) and fnmatch.fnmatchcase(rel, rule.glob):
                    self.failed += 1
                    raise mfusepy.FuseOSError(rule.errno_value)

    def listing(self, path: str, names: List[str]) -> List[str]:
        """The names a readdir answers: the previous listing of a lagging directory, else `names`."""
        rel = path.lstrip("/")
        with self._lock:
            previous = self._last_listing.get(rel)
            self._last_listing[rel] = names
            if previous is not None and any(fnmatch.fnmatchcase(rel, g) for g in self._lag_globs):
                return previous
        return names


def _fuse_errors(function):
    """OSError from the backing directory becomes the same errno to the kernel."""
    def wrapped(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except OSError as error:
            if isinstance(error, mfusepy.FuseOSError):
                raise
            raise mfusepy.FuseOSError(error.errno or errno.EIO) from error
    wrapped.__name__ = function.__name__
    return wrapped


class FaultOperations(mfusepy.Operations):
    """A passthrough over `backing` that asks `faults` before each operation."""
    use_ns = True

    def __init__(self, backing: str, faults: Faults):
        self.backing = os.path.realpath(backing)
        self.faults = faults

    def _real(self, op: str, path: str) -> str:
        self.faults.check(op, path)
        return os.path.join(self.backing, path.lstrip("/"))

    @_fuse_errors
    def getattr(self, path, fh=None):
        st = os.fstat(fh) if fh is not None else os.lstat(self._real("getattr", path))
        if fh is not None:
            self.faults.check("getattr", path)
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns",
                "st_ctime_ns", "st_ino")
        attrs = {key: getattr(st, key) for key in keys}
        for key in ("st_atime", "st_mtime", "st_ctime"):
            attrs[key] = attrs.pop(key + "_ns")
        return attrs

    @_fuse_errors
    def readdir(self, path, fh):
        names = sorted(os.listdir(self._real("readdir", path)))
        return [".", "..", *self.faults.listing(path, names)]

    @_fuse_errors
    def opendir(self, path):
        os.stat(self._real("opendir", path))
        return 0

    @_fuse_errors
    def open(self, path, flags):
        return os.open(self._real("open", path), flags)

    @_fuse_errors
    def create(self, path, mode, flags=os.O_WRONLY):
        return os.open(self._real("create", path), flags | os.O_CREAT, mode)

    @_fuse_errors
    def read(self, path, size, offset, fh):
        self.faults.check("read", path)
        return os.pread(fh, size, offset)

    @_fuse_errors
    def write(self, path, data, offset, fh):
        self.faults.check("write", path)
        return os.pwrite(fh, data, offset)

    @_fuse_errors
    def truncate(self, path, length, fh=None):
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._real("write", path), length)

    @_fuse_errors
    def flush(self, path, fh):
        self.faults.check("flush", path)

    @_fuse_errors
    def fsync(self, path, datasync, fh):
        self.faults.check("fsync", path)
        (os.fdatasync if datasync else os.fsync)(fh)

    @_fuse_errors
    def release(self, path, fh):
        os.close(fh)  # also drops a flock this descriptor holds (the kernel's flock_release)

    @_fuse_errors
    def flock(self, path, fh, op):
        self.faults.check("flock", path)
        fcntl.flock(fh, op)
        return 0

    @_fuse_errors
    def unlink(self, path):
        os.unlink(self._real("unlink", path))

    @_fuse_errors
    def rmdir(self, path):
        os.rmdir(self._real("rmdir", path))

    @_fuse_errors
    def mkdir(self, path, mode):
        os.mkdir(self._real("mkdir", path), mode)

    @_fuse_errors
    def rename(self, old, new):
        os.rename(self._real("rename", old), self._real("rename", new))

    @_fuse_errors
    def link(self, target, source):
        os.link(self._real("rename", source), self._real("rename", target))
        self.faults.check("linked", target)

    @_fuse_errors
    def symlink(self, target, source):
        os.symlink(source, self._real("create", target))

    @_fuse_errors
    def readlink(self, path):
        return os.readlink(self._real("getattr", path))

    @_fuse_errors
    def chmod(self, path, mode):
        os.chmod(self._real("getattr", path), mode)

    @_fuse_errors
    def chown(self, path, uid, gid):
        os.chown(self._real("getattr", path), uid, gid)

    @_fuse_errors
    def utimens(self, path, times: Optional[tuple] = None):
        os.utime(self._real("getattr", path), ns=times)

    @_fuse_errors
    def statfs(self, path):
        st = os.statvfs(self._real("getattr", path))
        return {key: getattr(st, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                  "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}
