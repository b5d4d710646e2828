"""The mark a preemption leaves in model_dir, so that whoever counts restarts tells it from a failure. No TF.

The writer task (the chief, or worker 0 without one) writes `model_dir/preempted.json` when it stopped
because it was asked to (SIGTERM; the manager's disruption) and the checkpoint of the stop step is saved
(tf_task/preemption.py). It lives in model_dir because a pod's run_dir dies with the pod. The restart budget
takes it (reads and removes it) at the next count: the writer's next start, or the Slurm batch script's look
at the step's outcome, whichever comes first. A mark counts only while the newest checkpoint is the stop
step's: one that training went past, or whose checkpoint was found damaged and moved aside, is stale and is
dropped.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Optional

from estimator_mnist.storage import write_atomic

MARK_FILE = "preempted.json"


def write_mark(model_dir: str, step: int, task: str, clock=time.time) -> str:
    path = os.path.join(model_dir, MARK_FILE)
    write_atomic(path, json.dumps({"step": step, "task": task, "time": clock()}))
    return path


def take_mark(model_dir: str, checkpoint_step: Optional[int]) -> Optional[dict]:
    """The preemption the mark records, if it is the newest checkpoint's; the mark is removed either way."""
    path = os.path.join(model_dir, MARK_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            mark = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        mark = None  # a torn mark proves nothing: the stop counts as a failure
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
    if not isinstance(mark, dict) or not isinstance(mark.get("step"), int) or mark["step"] != checkpoint_step:
        return None
    return mark
