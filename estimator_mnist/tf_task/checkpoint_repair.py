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
exclusive lock on `model_dir/.checkpoint-check.lock`. Only the writer task (the
chief, or worker 0 without one: the task that saves checkpoints) moves damaged
files aside and rewrites the state file, so that nothing rewrites it while the
chief may be saving; another task that finds the newest listed checkpoint
damaged, or the state file no state, lets the lock go and waits for the writer's
repair (CHECKPOINT_REPAIR_WAIT_SECS, then exit 200). The check reads the newest
listed checkpoint whole with TensorFlow's own reader, which checks each tensor's
checksum (on a bucket through TensorFlow's gs:// file system).

A damaged checkpoint is moved, never deleted, into `model_dir/damaged/`. Only damage moves one: a checksum
mismatch, a truncated file, an unparsable index (DataLoss and its kin). A read the storage refuses or fails
says nothing about the checkpoint, and moving an intact newest checkpoint aside would send training back,
possibly to step 0: PermissionDenied is permanent (exit 1, one line naming the path); NotFound (an NFS
client's stale view) and other transient errors are read again for the storage bound
(bounds.storage_retry_secs), then the task exits 200 naming the path, and nothing is moved. A listed
checkpoint counts as gone only on a confirmed absence of its index file (checkpoints.confirmed_absent: ENOENT
on two stats a retry interval apart, the listing agreeing), never because a read or a stat failed. The state
file is read strictly (checkpoint_state.py) and is never rewritten while any read or stat failed: a failure
raises out of the check before anything is written. Every
listing, move, removal and write goes through the storage layer, on a disk and a bucket alike; the lock is
model_files/lock.py's (the storage layer's: flock, or a lease where the file system has no flock and on a bucket).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from estimator_mnist import storage
from estimator_mnist.config import timeouts
from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.storage.bounds import storage_retry_secs
from estimator_mnist.model_files import checkpoints, layout
from estimator_mnist.model_files.lock import exclusive
from estimator_mnist.tf_task.checkpoint_state import MSG_STATE_UNREADABLE, read_listed, write_state

MSG_DAMAGED = ("checkpoint {path} is damaged ({problem}); moved its files to {moved}; {outcome}")
MSG_RESUME = "training resumes from {path}, the newest intact checkpoint"
MSG_NONE_LEFT = "no intact checkpoint is left, so training starts again from step 0"
ERR_DENIED = ("cannot read checkpoint {path}: permission denied ({problem}); it was not moved: give this task's "
              "user read access to model_dir and its files (or run the tasks as the user that wrote them), then "
              "start the task again")
ERR_UNAVAILABLE = ("cannot read checkpoint {path} for {secs:.0f} s ({problem}); it was not moved, the state file "
                   "was not changed: the storage failed to serve it, not the checkpoint; exiting with 200 "
                   "(retryable) so that a restart reads it again")
READ_RETRY_SECS = checkpoints.READ_RETRY_SECS
WAIT_SECS, WAIT_POLL = timeouts.CHECKPOINT_REPAIR_WAIT_SECS, 1.0
MSG_WAITING = ("{what}: this task is not the writer (the chief, or worker 0 without one), which alone repairs it; "
               "waiting up to {secs:.0f} s for its repair")
ERR_NOT_REPAIRED = ("{what}, and the writer (the chief, or worker 0 without one) has not repaired it within "
                    "{secs:.0f} s; exiting with 200 (retryable): the writer repairs it at its start")
WAIT_DAMAGED = "the newest listed checkpoint {path} is {kind}"
WAIT_STATE = "the checkpoint state file {path} is unreadable ({problem})"
DAMAGED, DENIED, UNAVAILABLE, GONE = "damaged", "permission denied", "unavailable", "gone"
MSG_GONE = "checkpoint {path} is listed but none of its files is there (moved away by hand?); {outcome}"
_PROBLEM_CHARS = 200


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


def checked(path: str, verify: Callable[[str], Optional[Problem]], sleep=time.sleep,
            clock=time.monotonic) -> Optional[Problem]:
    """verify(path), read again while the storage fails it, for the storage bound; a refusal or a lasting failure
    raises its one line. GONE only on a confirmed absence of the index file (checkpoints.confirmed_absent),
    whose stats that fail raise too: a failed stat is never an absence, a listing that lags (NFS) proves
    nothing."""
    bound = storage_retry_secs()
    deadline = clock() + bound
    while True:
        problem = verify(path)
        if problem is None or problem.kind == DAMAGED:
            return problem
        if problem.kind == DENIED:
            raise PermanentFailure(ERR_DENIED.format(path=path, problem=problem.text))
        if checkpoints.confirmed_absent(path + layout.INDEX_SUFFIX, sleep):  # taken away, not a failure
            return Problem(GONE, problem.text)
        if clock() + READ_RETRY_SECS > deadline:
            raise RetryableFailure(ERR_UNAVAILABLE.format(path=path, secs=bound, problem=problem.text))
        sleep(READ_RETRY_SECS)


def _files_of(prefix: str) -> List[str]:
    """The files of the checkpoint at `prefix`: by a listing, and by a stat of those every checkpoint has."""
    name = storage.basename(prefix)
    listed = {n for n in storage.listdir(storage.parent(prefix)) if n.startswith(name + ".")}
    listed |= {name + s for s in (layout.INDEX_SUFFIX, ".meta") if storage.exists(prefix + s)}
    return sorted(listed)


def move_aside(model_dir: str, prefix: str) -> str:
    """Moves every file of the checkpoint at `prefix` into model_dir/damaged/ (a numbered folder if taken)."""
    target = layout.damaged_dir(model_dir)
    storage.makedirs(target)
    name = storage.basename(prefix)
    taken = storage.listdir(target)
    if any(entry.startswith(name + ".") for entry in taken):
        number = len(taken)
        while f"{name}-{number}" in taken:
            number += 1
        target = storage.join(target, f"{name}-{number}")
        storage.makedirs(target)
    for file in _files_of(prefix):
        storage.move(storage.join(storage.parent(prefix), file), storage.join(target, file))
    return target


def _check(model_dir: str, log, verify, sleep, writer: bool, clock=time.monotonic):
    """(the newest intact checkpoint, None) once the state is right; (None, why) when this task must wait."""
    listed = read_listed(model_dir, sleep)
    state_path = layout.state_file(model_dir)
    if listed.problem is not None and not writer:
        return None, WAIT_STATE.format(path=state_path, problem=listed.problem)
    damaged, intact = [], None
    for path in reversed(listed.paths):
        problem = checked(path, verify, sleep, clock)
        if problem is None:
            intact = path
            break
        if not writer:
            return None, WAIT_DAMAGED.format(path=path, kind=problem.kind)
        damaged.append((path, problem))
    if listed.problem is not None:
        log(MSG_STATE_UNREADABLE.format(path=state_path, problem=listed.problem, model_dir=model_dir))
    outcome = MSG_RESUME.format(path=intact) if intact else MSG_NONE_LEFT
    for path, problem in damaged:
        log(MSG_GONE.format(path=path, outcome=outcome) if problem.kind == GONE else
            MSG_DAMAGED.format(path=path, problem=problem.text, moved=move_aside(model_dir, path), outcome=outcome))
    if damaged or listed.problem is not None:
        gone = {path for path, _ in damaged}
        write_state(model_dir, intact, [p for p in listed.paths if p not in gone])
    return intact, None


def fall_back_to_intact(model_dir: str, log: Callable[[str], None],
                        verify: Callable[[str], Optional[Problem]] = verify_checkpoint,
                        sleep=time.sleep, writer: bool = True, clock=time.monotonic) -> Optional[str]:
    """Makes the newest intact checkpoint the one Estimator restores; returns it (None: no checkpoint).
    Raises PermanentFailure or RetryableFailure (checked) before moving anything, when the storage fails.
    `writer`: this task saves the checkpoints (plan.is_chief), and alone repairs; another waits for it."""
    if not storage.isdir(model_dir):
        return None
    deadline, said = clock() + WAIT_SECS, False
    while True:
        with exclusive(layout.lock_file(model_dir), log):
            intact, waiting = _check(model_dir, log, verify, sleep, writer, clock)
        if waiting is None:
            return intact
        if clock() >= deadline:
            raise RetryableFailure(ERR_NOT_REPAIRED.format(what=waiting, secs=WAIT_SECS))
        if not said:
            log(MSG_WAITING.format(what=waiting, secs=WAIT_SECS))
            said = True
        sleep(WAIT_POLL)
