"""Reading a model_dir's state without TensorFlow: latest checkpoint step, evaluations, exports; on a disk or a
bucket alike, through the storage layer.

The launcher polls these while tasks run, so they must be cheap and must tolerate files that are being
written: `latest_checkpoint`, `listed_steps` and `read_eval_results` answer None (or nothing) for a file they
cannot read. What decides something that lasts (the checkpoint repair, the restart budget) reads strictly
(`read_strict`, `latest_checkpoint(..., strict=True)`): a file is absent only when the storage says so (ENOENT,
ENOTDIR, a bucket's 404; a checkpoint counts as gone only on `confirmed_absent`: two stats a retry interval
apart, its directory's listing agreeing), and any other error is raised as the storage layer names it, after the exit table: access refused is permanent (exit 1,
the file named), a storage that fails to serve it is retried for the storage bound, then retryable (exit 200).
"""

from __future__ import annotations

import json
import re
import time
from typing import List, Optional

from estimator_mnist import storage
from estimator_mnist.errors import RetryableFailure
from estimator_mnist.model_files import layout
from estimator_mnist.storage.bounds import READ_RETRY_SECS
from estimator_mnist.storage.errors import problem_text

# A file the storage failed to serve (EIO, ESTALE: an NFS client's stale handle) is asked again by the storage
# layer itself for the storage bound (storage/local.py, gcs.py). A read that says "absent" while a stat finds
# the file (replaced while read) is read again, READ_ATTEMPTS reads in all, READ_RETRY_SECS apart.
READ_ATTEMPTS = 3
ERR_READ_FAILED = ("cannot read {path} after {attempts} attempts ({problem}): it kept being said absent and then "
                   "found; nothing was changed; exiting with 200 (retryable) so that a restart reads it again")
_LATEST = re.compile(r'^model_checkpoint_path:\s*"(?P<path>[^"]*)"', re.MULTILINE)
_LISTED = re.compile(r'^(?:all_)?model_checkpoint_paths?:\s*"(?P<path>[^"]*)"', re.MULTILINE)
_STEP = re.compile(r"-(\d+)$")


def confirmed_absent(path: str, sleep=time.sleep) -> bool:
    """True only when `path` is absent for sure: a stat says so (ENOENT, ENOTDIR, a bucket's 404) twice,
    READ_RETRY_SECS apart, and the listing of its directory does not name it. A stat or listing that fails is
    raised as the storage layer names it (refused: exit 1; unavailable past the storage bound: exit 200): a
    failure is never an absence."""
    if storage.exists(path):
        return False
    sleep(READ_RETRY_SECS)
    if storage.exists(path):
        return False
    return storage.basename(path) not in storage.listdir(storage.parent(path))


def read_strict(path: str, sleep=time.sleep) -> Optional[str]:
    """The text of `path`; None only when it is absent: the read and then a stat of the file itself say so
    (ENOENT, ENOTDIR, a bucket's 404), never on another error. Refused: StorageDenied (exit 1);
    a storage that fails to serve it past the storage bound: StorageUnavailable (exit 200), both naming the
    path. Bytes that are not UTF-8 come back with replacement characters: unparsable, not unreadable."""
    problem = ""
    for attempt in range(1, READ_ATTEMPTS + 1):
        try:
            return storage.read_bytes(path).decode("utf-8", errors="replace")
        except FileNotFoundError as exc:
            if not storage.exists(path):
                return None
            problem = problem_text(exc)  # said missing, yet there: replaced while read; read it again
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
