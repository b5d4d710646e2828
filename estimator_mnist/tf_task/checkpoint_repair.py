"""A damaged newest checkpoint: fall back to the newest intact one before TensorFlow restores anything.

A checkpoint can be damaged on disk after Estimator listed it in the
`checkpoint` state file: a host that crashed before the page cache reached the
disk, a disk that filled up, a copy or a sync that stopped half-way. Estimator
would restore it blindly and fail at every restart, for ever.

Who checks: every task that restores from model_dir, in its TensorFlow process,
before its Estimator is built (runner.run_task): the trainers (under
MultiWorkerMirrored every worker restores from the shared model_dir, not only
the chief) and the evaluator, which exports what it scores. A ps task restores
nothing. Several tasks start at once on one model_dir, so the check holds an
exclusive lock on `model_dir/.checkpoint-check.lock`: the first task moves the
damaged files aside and rewrites the state file, and the tasks after it find
the newest listed checkpoint intact and agree on it. The check reads the
newest listed checkpoint whole with TensorFlow's own reader, which checks each
tensor's checksum.

A damaged checkpoint is moved, never deleted, into `model_dir/damaged/`. Only damage moves one: a checksum
mismatch, a truncated file, an unparsable index (DataLoss and its kin). A read the storage refuses or fails
says nothing about the checkpoint, and moving an intact newest checkpoint aside would send training back,
possibly to step 0: PermissionDenied is permanent (exit 1, one line naming the path); NotFound (an NFS
client's stale view) and other transient errors are read again READ_ATTEMPTS times, then the task exits 200
naming the path, and nothing is moved. The lock is model_dir_lock.py's (the storage layer's: flock, or a
lease where the file system has no flock and on a bucket).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from estimator_mnist.config import timeouts
from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.tf_task.model_dir_lock import exclusive

DAMAGED_DIR = "damaged"
LOCK_FILE = ".checkpoint-check.lock"
STATE_FILE = "checkpoint"
MSG_DAMAGED = ("checkpoint {path} is damaged ({problem}); moved its files to {moved}; {outcome}")
MSG_RESUME = "training resumes from {path}, the newest intact checkpoint"
MSG_NONE_LEFT = "no intact checkpoint is left, so training starts again from step 0"
MSG_STATE_UNREADABLE = ("the checkpoint state file {path} is unreadable ({problem}); rebuilt it from the checkpoint "
                        "files in {model_dir}")
ERR_DENIED = ("cannot read checkpoint {path}: permission denied ({problem}); it was not moved: give this task's "
              "user read access to model_dir and its files (or run the tasks as the user that wrote them), then "
              "start the task again")
ERR_UNAVAILABLE = ("cannot read checkpoint {path} after {attempts} attempts ({problem}); it was not moved: the "
                   "storage failed to serve it, not the checkpoint; exiting with 200 (retryable) so that a restart "
                   "reads it again")
READ_ATTEMPTS, READ_RETRY_SECS = 3, timeouts.CHECKPOINT_READ_RETRY_SECS
DAMAGED, DENIED, UNAVAILABLE, GONE = "damaged", "permission denied", "unavailable", "gone"
MSG_GONE = "checkpoint {path} is listed but none of its files is there (moved away by hand?); {outcome}"
_PROBLEM_CHARS = 200
_STEP = re.compile(r"-(\d+)\.index$")


@dataclass(frozen=True)
class Problem:
    """Why a checkpoint could not be read: `kind` is DAMAGED, DENIED or UNAVAILABLE."""

    kind: str
    text: str


# What TensorFlow's checkpoint reader says of damage. TF 2.15's py_checkpoint_reader turns most of the C++
# reader's errors into a bare OpError (code UNKNOWN), a permission denied included ("X.index; Permission
# denied"), so the class alone cannot tell them apart: the text does (tests/unit/test_checkpoint_repair.py,
# test_what_the_reader_says_is_told_apart, reads each from real files).
DAMAGE_TEXTS = ("Checksum does not match", "not an sstable", "Perhaps the file is corrupt", "Read less bytes than "
                "requested", "Data loss", "corrupted", "truncated")
DENIED_TEXTS = ("Permission denied",)


def kind_of(exc: BaseException) -> str:
    """Damage, a refusal, or a storage failure, by the error TensorFlow's reader raised."""
    import tensorflow as tf

    text = str(exc)
    if isinstance(exc, (tf.errors.PermissionDeniedError, PermissionError)) or any(t in text for t in DENIED_TEXTS):
        return DENIED
    if isinstance(exc, (tf.errors.DataLossError, tf.errors.OutOfRangeError, IndexError)) or \
            any(t in text for t in DAMAGE_TEXTS):
        return DAMAGED
    return UNAVAILABLE  # NotFound, Unavailable, Aborted, an I/O error: the storage, not the checkpoint


def verify_checkpoint(path: str) -> Optional[Problem]:
    """Why the checkpoint at prefix `path` cannot be restored, or None: every tensor is read, checksums checked."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    # py_checkpoint_reader raises OpError for an unreadable index or a checksum mismatch, IndexError for a
    # data file shorter than its index says (TF 2.15: "Read less bytes than requested"), ValueError for no files.
    except (tf.errors.OpError, IndexError, ValueError, OSError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        return Problem(kind_of(exc), text[:_PROBLEM_CHARS])
    return None


def checked(path: str, verify: Callable[[str], Optional[Problem]], sleep=time.sleep) -> Optional[Problem]:
    """verify(path), read again after a storage failure; a refusal or a lasting failure raises its one line."""
    for attempt in range(1, READ_ATTEMPTS + 1):
        problem = verify(path)
        if problem is None or problem.kind == DAMAGED:
            return problem
        if problem.kind == DENIED:
            raise PermanentFailure(ERR_DENIED.format(path=path, problem=problem.text))
        if attempt < READ_ATTEMPTS:
            sleep(READ_RETRY_SECS)
    if not glob.glob(glob.escape(path) + ".*"):  # still no file of it: taken away, not a storage failure
        return Problem(GONE, problem.text)
    raise RetryableFailure(ERR_UNAVAILABLE.format(path=path, attempts=READ_ATTEMPTS, problem=problem.text))


def _absolute(model_dir: str, path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(model_dir, path)


def _on_disk(model_dir: str) -> List[str]:
    """The checkpoint prefixes in model_dir by their index files, oldest step first."""
    found = [(int(m.group(1)), name[:-len(".index")]) for name in os.listdir(model_dir)
             for m in [_STEP.search(name)] if m]
    return [os.path.join(model_dir, prefix) for _, prefix in sorted(found)]


def _listed(model_dir: str, log) -> tuple:
    """(checkpoint prefixes, oldest first; whether the state file must be written again)."""
    import tensorflow as tf

    state_path = os.path.join(model_dir, STATE_FILE)
    if not os.path.exists(state_path):
        return [], False
    try:
        # TensorFlow's own parser; it returns None for a file it cannot parse (and logs why).
        state, problem = tf.train.get_checkpoint_state(model_dir), "not a checkpoint state"
    except ValueError as exc:  # parsed, but names no checkpoint
        state, problem = None, " ".join(str(exc).split())[:_PROBLEM_CHARS]
    if state is None:
        log(MSG_STATE_UNREADABLE.format(path=state_path, problem=problem, model_dir=model_dir))
        return _on_disk(model_dir), True
    paths = [_absolute(model_dir, p) for p in state.all_model_checkpoint_paths]
    newest = _absolute(model_dir, state.model_checkpoint_path) if state.model_checkpoint_path else None
    if newest and newest not in paths:
        paths.append(newest)
    return paths, False


def move_aside(model_dir: str, prefix: str) -> str:
    """Moves every file of the checkpoint at `prefix` into model_dir/damaged/ (a numbered folder if taken)."""
    target = os.path.join(model_dir, DAMAGED_DIR)
    os.makedirs(target, exist_ok=True)
    name = os.path.basename(prefix)
    if any(entry.startswith(name + ".") for entry in os.listdir(target)):
        target = os.path.join(target, f"{name}-{len(os.listdir(target))}")
        os.makedirs(target, exist_ok=True)
    for path in glob.glob(glob.escape(prefix) + ".*"):
        shutil.move(path, os.path.join(target, os.path.basename(path)))
    return target


def _write_state(model_dir: str, newest: Optional[str], paths: List[str]) -> None:
    import tensorflow as tf

    if newest is None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(model_dir, STATE_FILE))
        return
    # TensorFlow's own writer: it writes a temporary file and renames it over the old one.
    tf.compat.v1.train.update_checkpoint_state(model_dir, newest, all_model_checkpoint_paths=paths)


def fall_back_to_intact(model_dir: str, log: Callable[[str], None],
                        verify: Callable[[str], Optional[Problem]] = verify_checkpoint,
                        sleep=time.sleep) -> Optional[str]:
    """Makes the newest intact checkpoint the one Estimator restores; returns it (None: no checkpoint).
    Raises PermanentFailure or RetryableFailure (checked) before moving anything, when the storage fails."""
    if not os.path.isdir(model_dir):
        return None
    with exclusive(os.path.join(model_dir, LOCK_FILE), log):
        paths, rewrite = _listed(model_dir, log)
        damaged, intact = [], None
        for path in reversed(paths):
            problem = checked(path, verify, sleep)
            if problem is None:
                intact = path
                break
            damaged.append((path, problem))
        outcome = MSG_RESUME.format(path=intact) if intact else MSG_NONE_LEFT
        for path, problem in damaged:
            log(MSG_GONE.format(path=path, outcome=outcome) if problem.kind == GONE else
                MSG_DAMAGED.format(path=path, problem=problem.text, moved=move_aside(model_dir, path), outcome=outcome))
        if damaged or rewrite:
            gone = {path for path, _ in damaged}
            _write_state(model_dir, intact, [p for p in paths if p not in gone])
        return intact
