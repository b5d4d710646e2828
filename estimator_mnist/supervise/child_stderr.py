"""The TensorFlow child's stderr, passed on by `train`'s parent line by line without TensorFlow's known start-up
lines (startup_noise.KNOWN_STARTUP_LINES, matched exactly). No TensorFlow.

Only stderr passes through the parent: TensorFlow's C++ log, Python's logging and warnings all go there. The
child's stdout stays the parent's own, unchanged. So that nothing is lost or held back:
- every other line is written as soon as it is read, byte for byte;
- a partial line (no newline yet) is written once nothing more came for PARTIAL_LINE_SECS, once it is CHUNK
  bytes long, and at the end;
- the parent waits for the pipe's end after the child exits (`finish`), so the child's last lines come before
  the task's exit;
- when the parent's stderr loses its reader (`train ... 2>&1 | head`), it becomes /dev/null: the task goes on,
  and the pipe is still drained, so the child never blocks on a full pipe.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Callable, Optional

from estimator_mnist.config import timeouts
from estimator_mnist.startup_noise import is_known_startup_line

PARTIAL_LINE_SECS = 0.2
DRAIN_SECS = timeouts.STDERR_DRAIN_SECS  # after the child's exit: only a process the child started could still hold the pipe
CHUNK = 65536


def write_all(fd: int, data: bytes) -> None:
    """Writes `data` to `fd`; a target without a reader becomes /dev/null, and other write errors (a full disk
    under a log file) lose this chunk rather than stop the draining."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
            return
        except OSError:
            return


def forward_lines(source: int, target: int, drop: Callable[[str], bool] = is_known_startup_line) -> None:
    """Copies `source` to `target` until end of file, leaving out each whole line for which `drop` is True."""
    pending = b""
    while True:
        if pending and not select.select([source], [], [], PARTIAL_LINE_SECS)[0]:
            write_all(target, pending)  # a line still being written, or one that never ends: show it now
            pending = b""
            continue
        chunk = os.read(source, CHUNK)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        kept = [line + b"\n" for line in lines if not drop(line.decode("utf-8", "replace"))]
        if len(pending) >= CHUNK:  # no known line is this long: no need to hold it for its end
            kept, pending = kept + [pending], b""
        if kept:
            write_all(target, b"".join(kept))
    if pending and not drop(pending.decode("utf-8", "replace")):
        write_all(target, pending)


class FilteredStderr:
    """A pipe for a child's stderr and the thread that forwards it to this process's stderr (fd 2).

    Start the child with stderr=`child_end`, then call `started()`; call `finish()` once the child has ended
    (or could not start).
    """

    def __init__(self, target: int = 2):
        self.target = target
        self._read, self.child_end = os.pipe()
        self._thread: Optional[threading.Thread] = None

    def started(self) -> None:
        """The child holds its end now: close ours, so that the child's exit is the end of file."""
        os.close(self.child_end)
        self._thread = threading.Thread(target=forward_lines, args=(self._read, self.target),
                                        name="child-stderr", daemon=True)
        self._thread.start()

    def finish(self, timeout: float = DRAIN_SECS) -> None:
        """Waits until the child's last line is passed on (at most `timeout`)."""
        if self._thread is None:
            os.close(self.child_end)  # the child never started
        else:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return  # a process the child started still holds the pipe: its thread ends with this process
        os.close(self._read)
