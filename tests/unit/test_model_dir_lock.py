"""The model_dir lock: flock where the file system has it, a lock file where it answers ENOSYS or EOPNOTSUPP."""

import errno
import os
import threading
import time

import pytest

from estimator_mnist.tf_task import model_dir_lock
from estimator_mnist.tf_task.model_dir_lock import MSG_NO_FLOCK, MSG_NO_LOCK, STALE_SECS, exclusive


def _unsupported(code):
    def flock(handle, operation):
        raise OSError(code, os.strerror(code))
    return flock


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK])
def test_without_flock_a_lock_file_excludes_the_others(tmp_path, code):
    path, inside, most, lines = str(tmp_path / "lock"), [], [], []

    def task():
        with exclusive(path, lines.append, flock=_unsupported(code)):
            inside.append(1)
            most.append(len(inside))
            time.sleep(0.05)
            inside.pop()

    threads = [threading.Thread(target=task) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(most) == 1 and len(most) == 4
    assert lines[0] == MSG_NO_FLOCK.format(path=path, reason=os.strerror(code), held=path + ".held")
    assert not os.path.exists(path + ".held")


def test_a_stale_lock_file_is_broken(tmp_path):
    path = str(tmp_path / "lock")
    with open(path + ".held", "w") as handle:
        handle.write("gone-host 4711\n")
    old = time.time() - STALE_SECS - 1
    os.utime(path + ".held", (old, old))
    entered = []
    with exclusive(path, lambda line: None, flock=_unsupported(errno.ENOSYS)):
        entered.append(True)
    assert entered and not os.path.exists(path + ".held")


def test_another_flock_error_is_not_hidden(tmp_path):
    with pytest.raises(OSError):
        with exclusive(str(tmp_path / "lock"), print, flock=_unsupported(errno.EBADF)):
            pass


def test_a_lock_that_cannot_be_made_goes_on_with_one_warning(tmp_path):
    path, lines, entered = str(tmp_path / "missing" / "lock"), [], []
    with exclusive(path, lines.append):
        entered.append(True)
    assert entered and len(lines) == 1 and lines[0].startswith("warning: cannot lock ")
    assert lines[0] == MSG_NO_LOCK.format(path=path, reason="No such file or directory")


def test_flock_is_the_lock_where_it_works(tmp_path):
    lines = []
    with exclusive(str(tmp_path / "lock"), lines.append):
        pass
    assert lines == [] and not os.path.exists(str(tmp_path / "lock.held"))
    assert model_dir_lock.STALE_SECS > 10  # a check takes seconds; a live holder is never broken
