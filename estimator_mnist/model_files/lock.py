"""The checkpoint check's lock on model_dir: the storage layer's lock (storage/lock.py: flock, else a lease with
a heartbeat, on a disk and on a bucket alike), or, where not even that can be made, none. No TF.

Should the lock be impossible to make (a read-only model_dir, a directory this task may not write), the task
goes on without a lock after one warning line: two tasks repairing at once can only move the same damaged
files twice, which the second finds gone. Any other failure (a storage that fails to serve) is raised as
what it is.
"""

from __future__ import annotations

import contextlib
import errno
from typing import Callable

from estimator_mnist.storage import lock
from estimator_mnist.storage.errors import problem_text

# What making the lock says when this task cannot write there: go on without one.
CANNOT_MAKE = (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS)
MSG_NO_FLOCK = lock.MSG_NO_FLOCK
MSG_NO_LOCK = ("warning: cannot lock {path} ({reason}); checking the checkpoints without a lock: tasks that start "
               "together may repeat the check")


@contextlib.contextmanager
def exclusive(path: str, log: Callable[[str], None], flock=None, lease_factory=None):
    """Holds the storage layer's exclusive lock named `path` for the `with` block, else none after one warning."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(lock.exclusive(path, log, flock=flock, lease_factory=lease_factory))
        except PermissionError as exc:
            log(MSG_NO_LOCK.format(path=path, reason=problem_text(exc)))
        except OSError as exc:
            if exc.errno not in CANNOT_MAKE:
                raise
            log(MSG_NO_LOCK.format(path=path, reason=problem_text(exc)))
        yield
