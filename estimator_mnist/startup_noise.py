"""TensorFlow's start-up noise kept off the console of the commands a user runs in a terminal.

On a CPU-only machine TF 2.15 prints, before any line of ours: cuDNN, cuFFT
and cuBLAS "factory" errors, "could not find cuda drivers", a TensorRT
warning, the oneDNN and CPU-feature notices, and deprecation warnings from
Python. None of it says anything about the run. Tasks keep all of it in
their logs; `predict` and `summary` silence it; `prepare-data` sends it to a
log file (`to_log_file`) and still prints its own lines and any error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys


def before_import() -> None:
    """C++ messages below FATAL and Python warnings off; call before TensorFlow is imported. A user's own
    TF_CPP_MIN_LOG_LEVEL wins."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for name in ("tensorflow", "absl", "tensorboard"):
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def to_log_file(path: str):
    """File descriptors 1 and 2 (C++ and Python output alike) go to `path` while the block runs.

    Yields a stream on the real stderr for the lines that must still reach the user.
    """
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    console = os.fdopen(os.dup(saved_err), "w", buffering=1)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield console
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            console.close()
