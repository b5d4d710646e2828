"""TensorFlow's start-up noise kept off the console of the commands a user runs in a terminal.

On a CPU-only machine TF 2.15 prints, before any line of ours: cuDNN, cuFFT
and cuBLAS "factory" errors, "could not find cuda drivers", a TensorRT
warning, the oneDNN and CPU-feature notices, and deprecation warnings from
Python. None of it says anything about the run. `predict` and `summary`
silence it; `prepare-data` sends it to a log file (`to_log_file`) and still
prints its own lines and any error. A task (`train`, also under `launch`)
drops only the exact lines of KNOWN_STARTUP_LINES from its output
(supervise/child_stderr.py): its own stderr is a pod's only log, and every other line of
TensorFlow's, real errors included, must still show there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys

# The start-up lines TF 2.15.1 prints in every task on a machine without CUDA or TensorRT (as captured from
# `estimator-mnist train` by hand; tests/helpers.py keeps the whole lines): the message after the C++ log
# prefix, and its severity.
CUDNN_FACTORY = ("Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN when one has "
                 "already been registered")
CUFFT_FACTORY = ("Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when one has "
                 "already been registered")
CUBLAS_FACTORY = ("Unable to register cuBLAS factory: Attempting to register factory for plugin cuBLAS when one has "
                  "already been registered")
TF_TRT_WARNING = "TF-TRT Warning: Could not find TensorRT"
# An INFO line: shown only when TF_CPP_MIN_LOG_LEVEL is 0 (the user's own, or session.log_device_placement).
ONEDNN_NOTICE = ("oneDNN custom operations are on. You may see slightly different numerical results due to "
                 "floating-point round-off errors from different computation orders. To turn them off, set the "
                 "environment variable `TF_ENABLE_ONEDNN_OPTS=0`.")
KNOWN_STARTUP_LINES = frozenset({("E", CUDNN_FACTORY), ("E", CUFFT_FACTORY), ("E", CUBLAS_FACTORY),
                                 ("W", TF_TRT_WARNING), ("I", ONEDNN_NOTICE)})
# TF 2.15's C++ log prefix: local time to the microsecond, severity, source file and line, as in
# "<date> <time>.<microseconds>: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] ".
# TF 2.15 is the last release with tf.estimator, so no later format (absl's "E0000 00:00:...") can reach a task.
CPP_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}: (?P<severity>[IWEF]) [^\s:\]]+:\d+\] "
                          r"(?P<message>.*)")


def is_known_startup_line(line: str) -> bool:
    """Whether `line` (with or without its newline) is exactly one of KNOWN_STARTUP_LINES as TensorFlow logs it."""
    match = CPP_LOG_LINE.fullmatch(line[:-1] if line.endswith("\n") else line)
    return match is not None and (match["severity"], match["message"]) in KNOWN_STARTUP_LINES


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
