"""Reading a model_dir's state without TensorFlow: latest checkpoint step, evaluations, exports; on a disk or a
bucket alike, through the storage layer.

The launcher polls these while tasks run, so they must be cheap and must tolerate files that are being
written: `latest_checkpoint`, `listed_steps` and `read_eval_results` answer None (or nothing) for a file they
cannot read. What decides something that lasts (the checkpoint repair, the restart budget) reads strictly
(`read_strict`, `latest_checkpoint(..., strict=True)`): a missing file is confirmed by a stat of the file itself,
and any other read error is named as what it is, after the exit table: access refused is permanent (exit 1, the
file named), a storage that fails to serve it is retryable (exit 200, after READ_ATTEMPTS reads).
"""

from __future__ import annotations

import json
import re
import time
from typing import List, Optional

from estimator_mnist import storage
from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.model_files import layout
from estimator_mnist.storage.bounds import READ_RETRY_SECS
from estimator_mnist.storage.errors import StorageDenied, StorageUnavailable, problem_text

# A file the storage failed to serve (EIO, ESTALE: an NFS client's stale handle) is read again after
# READ_RETRY_SECS (storage/bounds.py, listed in config/timeouts.py), READ_ATTEMPTS reads in all. A bucket's
# requests are retried by the layer itself (STORAGE_RETRY_SECS).
READ_ATTEMPTS = 3
ERR_READ_DENIED = ("cannot read {path}: permission denied ({problem}); nothing was changed: give this task's user "
                   "read and write access to model_dir and its files (or run the tasks as the user that wrote "
                   "them), then start the task again")
ERR_READ_FAILED = ("cannot read {path} after {attempts} attempts ({problem}): the storage failed to serve it; "
                   "nothing was changed; exiting with 200 (retryable) so that a restart reads it again")
_LATEST = re.compile(r'^model_checkpoint_path:\s*"(?P<path>[^"]*)"', re.MULTILINE)
_LISTED = re.compile(r'^(?:all_)?model_checkpoint_paths?:\s*"(?P<path>[^"]*)"', re.MULTILINE)
_STEP = re.compile(r"-(\d+)$")


def read_strict(path: str, sleep=time.sleep) -> Optional[str]:
    """The text of `path`; None only when it is absent, confirmed by a stat of the file itself after the read
    said so. Refused: PermanentFailure (StorageDenied on a bucket); a storage that fails to serve it:
    RetryableFailure after READ_ATTEMPTS reads (StorageUnavailable on a bucket, already retried by the layer).
    Bytes that are not UTF-8 come back with replacement characters: unparsable, not unreadable."""
    problem = None
    for attempt in range(1, READ_ATTEMPTS + 1):
        try:
            return storage.read_bytes(path).decode("utf-8", errors="replace")
        except FileNotFoundError as exc:
            try:
                if not storage.exists(path):
                    return None
            except OSError as error:
                exc = error
            problem = problem_text(exc)  # said missing, yet there: replaced while read; read it again
        except (StorageDenied, StorageUnavailable):
            raise
        except PermissionError as exc:
            raise PermanentFailure(ERR_READ_DENIED.format(path=path, problem=problem_text(exc))) from None
        except OSError as exc:
            problem = problem_text(exc)  # EIO, ESTALE (an NFS client's stale handle): read it again
        if attempt < READ_ATTEMPTS:
            sleep(READ_RETRY_SECS)
    raise RetryableFailure(ERR_READ_FAILED.format(path=path, attempts=READ_ATTEMPTS, problem=problem))


def _state_text(model_dir: str, strict: bool) -> Optional[str]:
    path = layout.state_file(model_dir)
    if strict:
        return read_strict(path)
    try:
        return storage.read_bytes(path).decode("utf-8", errors="replace")
    except OSError:
        return None


def latest_checkpoint(model_dir: str, strict: bool = False) -> Optional[str]:
    """The path the `checkpoint` state file names, if its index file exists. `strict`: read errors are raised
    named (read_strict) instead of answering None."""
    text = _state_text(model_dir, strict)
    match = _LATEST.search(text) if text else None
    if not match:
        return None
    path = layout.in_model_dir(model_dir, match["path"])
    try:
        return path if storage.exists(path + layout.INDEX_SUFFIX) else None
    except OSError:
        if strict:
            raise
        return None


def listed_steps(model_dir: str) -> Optional[List[int]]:
    """The steps the `checkpoint` state file lists (newest and kept ones), or None when there is no state file
    to tell (missing, unreadable, naming no checkpoint)."""
    text = _state_text(model_dir, strict=False)
    steps = sorted({step for step in map(step_of, _LISTED.findall(text or "")) if step is not None})
    return steps or None


def step_of(checkpoint_path: Optional[str]) -> Optional[int]:
    """The global step in a checkpoint path such as .../model.ckpt-700."""
    match = _STEP.search(checkpoint_path) if checkpoint_path else None
    return int(match.group(1)) if match else None


def has_state(model_dir: str) -> bool:
    """Whether model_dir holds a checkpoint state file (a run that saved a checkpoint there)."""
    return storage.isfile(layout.state_file(model_dir))


def has_evaluations(model_dir: str) -> bool:
    return storage.isfile(layout.eval_results_file(model_dir))


def latest_step(model_dir: str, strict: bool = False) -> Optional[int]:
    return step_of(latest_checkpoint(model_dir, strict))


def read_eval_results(model_dir: str) -> List[dict]:
    """Every evaluation the evaluator recorded, oldest first; a line being written is skipped."""
    try:
        text = storage.read_bytes(layout.eval_results_file(model_dir)).decode("utf-8", errors="replace")
    except OSError:
        return []
    results = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            results.append(record)
    return results


def final_of(records: List[dict], max_steps: int) -> Optional[dict]:
    """The newest of `records` (evaluations, oldest first) of a checkpoint at or past max_steps."""
    return next((r for r in reversed(records) if r.get("global_step", -1) >= max_steps), None)


def final_evaluation(model_dir: str, max_steps: int) -> Optional[dict]:
    """The evaluation of a checkpoint at or past max_steps, if the evaluator has recorded one."""
    return final_of(read_eval_results(model_dir), max_steps)


def work_saved(model_dir: str, max_steps: int, evaluates: bool) -> Optional[str]:
    """What of a task's work is on disk once it is all there (else None): after that, a stop loses nothing.

    `evaluates`: the evaluator, and a process that evaluates itself, are done once the final evaluation (and
    its export) is recorded; the other tasks once the final checkpoint is saved. The task's TensorFlow process
    (tf_task/preemption.py) and its parent (supervise/task_parent.py) decide 0 or 200 after a signal by it."""
    if evaluates:
        final = final_evaluation(model_dir, max_steps)
        return f"the final checkpoint (step {final['global_step']}) is evaluated" if final else None
    step = latest_step(model_dir)
    return f"the final checkpoint (step {step}) is saved" if step is not None and step >= max_steps else None


def wait_for_final_evaluation(model_dir: str, max_steps: int, timeout_secs: float,
                              poll_secs: float = 0.5) -> Optional[dict]:
    """The final evaluation once it is recorded, or None after `timeout_secs`."""
    deadline = time.monotonic() + timeout_secs
    while True:
        record = final_evaluation(model_dir, max_steps)
        if record is not None or time.monotonic() >= deadline:
            return record
        time.sleep(poll_secs)
