"""An exclusive lock on a model_dir shared by several hosts, on file systems with and without flock(2). No TF.

flock(2) is the lock: local disks and NFS v4 honour it. A Lustre client mounted without `flock` (or
`localflock`) answers ENOSYS, some FUSE and object-store mounts EOPNOTSUPP, and an NFS v3 mount without a
lock daemon ENOLCK: there the lock is a lock file made with O_CREAT|O_EXCL, which NFS v3+, Lustre and CephFS
make atomic. Its holder names itself in it; a lock file older than STALE_SECS is left by a task that died
while holding it (the check it guards takes seconds), and is broken. Should even that fail (a read-only
model_dir), the task goes on without a lock after one warning line: two tasks repairing at once can only
move the same damaged files twice, which the second finds gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from typing import Callable

from estimator_mnist.config import timeouts

NO_FLOCK = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
STALE_SECS = timeouts.MODEL_DIR_LOCK_STALE_SECS
POLL_SECS = 0.2
MSG_NO_FLOCK = ("warning: {path}: this file system does not support flock(2) ({reason}); using the lock file "
                "{held} instead")
MSG_NO_LOCK = ("warning: cannot lock {path} ({reason}); checking the checkpoints without a lock: tasks that start "
               "together may repeat the check")


@contextlib.contextmanager
def _lock_file(held: str, clock: Callable[[], float], sleep: Callable[[float], None]):
    while True:
        try:
            fd = os.open(held, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            try:
                age = clock() - os.stat(held).st_mtime
            except FileNotFoundError:
                continue  # released meanwhile
            if age > STALE_SECS:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(held)  # its holder died: break the stale lock
                continue
            sleep(POLL_SECS)
    try:
        os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        os.close(fd)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(held)


@contextlib.contextmanager
def exclusive(path: str, log: Callable[[str], None], flock=None, clock=time.time, sleep=time.sleep):
    """Holds an exclusive lock named `path` for the `with` block (flock, else a lock file, else none)."""
    flock = flock or fcntl.flock
    try:
        handle = open(path, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
    except OSError as exc:
        log(MSG_NO_LOCK.format(path=path, reason=exc.strerror or exc))
        yield
        return
    with handle:
        try:
            flock(handle, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in NO_FLOCK:
                raise
            held = path + ".held"
            log(MSG_NO_FLOCK.format(path=path, reason=exc.strerror or errno.errorcode.get(exc.errno), held=held))
            try:
                stack = contextlib.ExitStack()
                stack.enter_context(_lock_file(held, clock, sleep))
            except OSError as error:
                log(MSG_NO_LOCK.format(path=held, reason=error.strerror or error))
                stack = contextlib.ExitStack()
            with stack:
                yield
            return
        try:
            yield
        finally:
            flock(handle, fcntl.LOCK_UN)
