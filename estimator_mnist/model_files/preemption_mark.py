"""The mark a preemption leaves in model_dir, so that whoever counts restarts tells it from a failure. No TF.

The writer task (the chief, or worker 0 without one) writes `model_dir/preempted.json` when it stopped
because it was asked to (SIGTERM; the manager's disruption) and the checkpoint of the stop step is saved
(tf_task/preemption.py). It lives in model_dir because a pod's run_dir dies with the pod. The restart budget
takes it (reads and removes it) at the next count: the writer's next start, or the Slurm batch script's look
at the step's outcome, whichever comes first. A mark counts only while the newest checkpoint is the stop
step's: one that training went past, or whose checkpoint was found damaged and moved aside, is stale and is
dropped.

On a bucket as on a disk, through the storage layer: an atomic write, a strict read (checkpoints.read_strict: a
refused read is exit 1, a storage that fails to serve it 200, never "no mark"), a removal.
"""

from __future__ import annotations

import json
import time
from typing import Optional

from estimator_mnist import storage
from estimator_mnist.model_files.checkpoints import read_strict
from estimator_mnist.model_files.layout import mark_file


def write_mark(model_dir: str, step: int, task: str, clock=time.time) -> str:
    path = mark_file(model_dir)
    storage.write_atomic(path, json.dumps({"step": step, "task": task, "time": clock()}))
    return path


def _parsed(text: Optional[str]) -> Optional[dict]:
    """The mark in `text`, or None where there is none or it is torn (unparsable, no integer step): a torn mark
    proves nothing."""
    if text is None:
        return None
    try:
        mark = json.loads(text)
    except ValueError:
        return None
    return mark if isinstance(mark, dict) and isinstance(mark.get("step"), int) else None


def mark_step(model_dir: str) -> Optional[int]:
    """The step the mark records, without taking it; None where there is no mark or it is torn. A mark the
    storage refuses or fails to serve raises as in take_mark."""
    mark = _parsed(read_strict(mark_file(model_dir)))
    return mark["step"] if mark is not None else None


def take_mark(model_dir: str, checkpoint_step: Optional[int]) -> Optional[dict]:
    """The preemption the mark records, if it is the newest checkpoint's; the mark is removed either way.
    A mark the storage refuses or fails to serve raises the layer's one line (PermanentFailure, RetryableFailure)."""
    path = mark_file(model_dir)
    text = read_strict(path)
    if text is None:
        return None
    mark = _parsed(text)  # a torn mark: the stop counts as a failure
    storage.remove(path, missing_ok=True)
    return mark if mark is not None and mark["step"] == checkpoint_step else None
