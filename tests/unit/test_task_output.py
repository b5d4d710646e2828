"""TensorFlow's known start-up lines left out of a task's stderr, exactly those: the matcher and the forwarding."""

import os
import select
import tempfile
import threading

import pytest

from estimator_mnist.supervise.child_stderr import CHUNK, FilteredStderr, forward_lines
from estimator_mnist.startup_noise import (CUBLAS_FACTORY, CUDNN_FACTORY, CUFFT_FACTORY, ONEDNN_NOTICE, TF_TRT_WARNING,
                                      is_known_startup_line)
from tests.helpers import TF_STARTUP_LINES

KNOWN = TF_STARTUP_LINES
PREFIX = "2026-11-25 05:57:20.356412: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] "
KEPT = [
    # Other start-up lines: not on the list.
    "2026-11-25 05:57:26.050802: I external/local_tsl/tsl/cuda/cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "2026-11-25 05:57:26.124848: I tensorflow/core/platform/cpu_feature_guard.cc:182] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    # Near misses: another severity, a message with more or less, no prefix, a prefix out of shape.
    PREFIX.replace(": E ", ": F ") + CUDNN_FACTORY,
    PREFIX.replace(": E ", ": W ") + CUFFT_FACTORY,
    PREFIX + CUBLAS_FACTORY + " (and a real problem)",
    PREFIX + CUBLAS_FACTORY[:-1],
    PREFIX + " " + CUDNN_FACTORY,
    CUDNN_FACTORY,
    "E " + CUDNN_FACTORY,
    PREFIX.replace(".356412", "") + CUDNN_FACTORY,
    "Traceback: " + PREFIX + CUDNN_FACTORY,
    PREFIX + CUDNN_FACTORY + "\r",
    "2026-11-25 05:57:21.210130: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT Warning: Could not "
    "find TensorRT in /usr/lib",
    # Real errors.
    PREFIX + "Unable to register cuDNN factory: could not load libcudnn.so.8",
    "2026-11-25 06:00:00.000001: E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
    "BaseCollectiveExecutor::StartAbort UNAVAILABLE: failed to connect to all addresses",
    "estimator-mnist: error: MNIST is not prepared in /data",
    "",
]


@pytest.mark.parametrize("line", KNOWN)
def test_each_known_start_up_line_is_recognised_with_or_without_its_newline(line):
    assert is_known_startup_line(line) and is_known_startup_line(line + "\n")


def test_the_list_is_the_five_messages_tensorflow_prints():
    messages = [line.split("] ", 1)[1] for line in KNOWN]
    assert messages == [CUDNN_FACTORY, CUFFT_FACTORY, CUBLAS_FACTORY, TF_TRT_WARNING, ONEDNN_NOTICE]


@pytest.mark.parametrize("line", KEPT)
def test_near_misses_and_real_errors_are_kept(line):
    assert not is_known_startup_line(line)


def forwarded(data: bytes) -> bytes:
    """What forward_lines passes on (to a file) of `data` written at once into a pipe."""
    source_read, source_write = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(source_write, data), os.close(source_write)))
    writer.start()
    with tempfile.TemporaryFile() as target:
        forward_lines(source_read, target.fileno())
        writer.join()
        os.close(source_read)
        target.seek(0)
        return target.read()


def test_every_other_line_passes_unchanged_in_order():
    lines = [KNOWN[0], KEPT[0], KNOWN[1], KNOWN[2], KEPT[-3], KNOWN[3], KEPT[2], KNOWN[4], KEPT[-2]]
    data = "".join(line + "\n" for line in lines).encode() + b"\xff\xfe raw bytes\n" + b"no newline at the end"
    expected = "".join(line + "\n" for line in lines if line not in KNOWN).encode() + \
        b"\xff\xfe raw bytes\n" + b"no newline at the end"
    assert forwarded(data) == expected


def test_a_long_output_is_passed_on_whole():
    line = b"2026-11-25 06:00:00,000 chief:0 INFO loss = 0.1, step = 7\n"
    data = (line * (3 * CHUNK // len(line))) + b"x" * (2 * CHUNK) + b"\n"
    assert forwarded(data) == data


def test_a_partial_line_is_shown_without_waiting_for_its_end():
    source_read, source_write = os.pipe()
    target_read, target_write = os.pipe()
    thread = threading.Thread(target=forward_lines, args=(source_read, target_write), daemon=True)
    thread.start()
    os.write(source_write, b"Continue? [y/N] ")
    assert select.select([target_read], [], [], 30)[0], "the partial line was held back"
    assert os.read(target_read, 100) == b"Continue? [y/N] "  # before any newline or the end of the pipe
    os.write(source_write, b"n\n" + KNOWN[0].encode() + b"\n")
    os.close(source_write)
    thread.join(30)
    assert not thread.is_alive()
    os.close(target_write)
    with os.fdopen(target_read, "rb") as out:
        assert out.read() == b"n\n"
    os.close(source_read)


def test_a_target_without_a_reader_becomes_dev_null_and_the_pipe_is_still_drained():
    target_read, target_write = os.pipe()
    os.close(target_read)  # `train ... 2>&1 | head -1`, once head has its line
    data = b"a line the reader no longer wants\n" * 10000  # far more than a pipe holds
    assert forwarded_to(target_write, data) == len(data)
    assert os.readlink(f"/proc/self/fd/{target_write}") == os.devnull
    os.close(target_write)


def forwarded_to(target: int, data: bytes) -> int:
    """Forwards `data` to `target`; returns how much of it the writer got into the pipe (all, unless blocked)."""
    source_read, source_write = os.pipe()
    written = []
    writer = threading.Thread(target=lambda: (written.append(os.write(source_write, data)), os.close(source_write)),
                              daemon=True)
    writer.start()
    forward_lines(source_read, target)
    writer.join(30)
    os.close(source_read)
    return written[0] if written else 0


def test_a_child_that_never_started_leaves_no_descriptor_open():
    before = set(os.listdir("/proc/self/fd"))
    FilteredStderr().finish()
    assert set(os.listdir("/proc/self/fd")) == before
