"""Reading a model_dir's state without TensorFlow: latest checkpoint step, evaluations.

The launcher polls these while tasks run, so they must be cheap and must
tolerate files that are being written.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import List, Optional

from estimator_mnist import storage

EVAL_RESULTS_FILE = "eval_results.jsonl"
_LATEST = re.compile(r'^model_checkpoint_path:\s*"(?P<path>[^"]*)"', re.MULTILINE)
_LISTED = re.compile(r'^(?:all_)?model_checkpoint_paths?:\s*"(?P<path>[^"]*)"', re.MULTILINE)
_STEP = re.compile(r"-(\d+)$")


def latest_checkpoint(model_dir: str) -> Optional[str]:
    """The path the `checkpoint` index file names, if its files exist."""
    try:
        match = _LATEST.search(storage.read_text(storage.join(model_dir, "checkpoint")))
    except (OSError, UnicodeDecodeError):
        return None
    if not match:
        return None
    path = match["path"]
    if not os.path.isabs(path) and not storage.is_bucket(path):
        path = storage.join(model_dir, path)
    return path if storage.exists(path + ".index") else None


def listed_steps(model_dir: str) -> Optional[List[int]]:
    """The steps the `checkpoint` state file lists (newest and kept ones), or None when there is no state file
    to tell (missing, unreadable, naming no checkpoint)."""
    try:
        paths = _LISTED.findall(storage.read_text(storage.join(model_dir, "checkpoint")))
    except (OSError, UnicodeDecodeError):
        return None
    steps = sorted({step for step in map(step_of, paths) if step is not None})
    return steps or None


def step_of(checkpoint_path: Optional[str]) -> Optional[int]:
    """The global step in a checkpoint path such as .../model.ckpt-700."""
    match = _STEP.search(checkpoint_path) if checkpoint_path else None
    return int(match.group(1)) if match else None


def exports_in(export_base: str) -> List[str]:
    """The finished SavedModels under an export base directory, oldest first.

    Only finished exports have a numeric name (a timestamp): export.py writes
    each under a temporary name and renames it, as TensorFlow Serving expects.
    """
    if not os.path.isdir(export_base):
        return []
    stamps = sorted(int(name) for name in os.listdir(export_base)
                    if name.isdigit() and os.path.isfile(os.path.join(export_base, name, "saved_model.pb")))
    return [os.path.join(export_base, str(stamp)) for stamp in stamps]


def latest_step(model_dir: str) -> Optional[int]:
    return step_of(latest_checkpoint(model_dir))


def read_eval_results(model_dir: str) -> List[dict]:
    """Every evaluation the evaluator recorded, oldest first; a line being written is skipped."""
    results = []
    try:
        text = storage.read_bytes(storage.join(model_dir, EVAL_RESULTS_FILE)).decode("utf-8", errors="replace")
    except OSError:
        return results
    for line in text.splitlines():
        try:
            results.append(json.loads(line))
        except ValueError:
            continue
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
    (tf_task/preemption.py) and its parent (task_process.py) decide 0 or 200 after a signal by it."""
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
