"""Progress records: what each trainer writes while it trains, and what the launcher and benchmarks read.

One JSON file per task, `<records_dir>/progress/<task>.json` (run_dir, or model_dir when that is a bucket:
Config.records_dir), rewritten
atomically after the first step, then at least every WRITE_EVERY_SECS of
training, and at the end:

    {"task": "worker:0", "pid": 4242, "parent_pid": 4240, "local_step": 310, "global_step": 310, "loss": 0.061,
     "examples_per_sec": 812.5, "examples_per_step": 256, "time": 1795342427.1, "first_step_time": 1795342391.4,
     "done": false, "step_times": [[1, t1], [10, t10], [20, t20], ...], "cpus": [0, 1], "precision": "float32"}

`time` is the wall-clock time of the newest step; `examples_per_sec` is this
task's rate since its previous record, `examples_per_step` its images per
local step; `saves` (the chief's) each checkpoint's save as [step, started, saved], wall-clock times
(tf_task/hooks.py's SaveTimesListener; the benchmarks join them to eval_results.jsonl's `started`); `step_times` holds the first step, every STEP_TIMES_EVERY-th and the newest, for throughput and start-up
figures; `cpus` the cores the task may run on (its CPU affinity); `precision` what model.precision resolved to. Records belong to one process (`pid`, and `parent_pid`: `train`
runs TensorFlow in a child of the process that was started): after a
restart the new process overwrites them. No TensorFlow, so stand-in tasks and the Keras
reference write the same records.
"""

from __future__ import annotations

import os
import time
from typing import Dict, Optional

from estimator_mnist import storage
from estimator_mnist.model_files import layout

WRITE_EVERY_SECS = 2.0
STEP_TIMES_EVERY = 10
MAX_SAVES = 100  # a long run's record stays small
FRESH_SECS = 10.0  # a record's rate says how fast its task runs while it is this recent


progress_path = layout.progress_file  # <records_dir>/progress/<type>-<index>.json of a TaskId


class ProgressWriter:
    """Collects one task's steps and writes its record when due."""

    def __init__(self, path, task: str, examples_per_step: int, clock=time.time):
        self._path = str(path) if path else None
        self._task = task
        self._examples_per_step = examples_per_step
        self._clock = clock
        # `train` runs TensorFlow in a child of the process a launcher starts: both pids identify the task.
        self._record = {"task": task, "pid": os.getpid(), "parent_pid": os.getppid(), "local_step": 0,
                        "global_step": None, "loss": None, "examples_per_sec": None,
                        "examples_per_step": examples_per_step, "time": None, "first_step_time": None,
                        "done": False, "step_times": [], "cpus": sorted(os.sched_getaffinity(0))}
        self._written_at = None  # (local step, time) of the last write

    @property
    def local_steps(self) -> int:
        return self._record["local_step"]

    def step(self, global_step: Optional[int], loss: Optional[float]) -> None:
        """After each training step of this task."""
        now = self._clock()
        record = self._record
        record["local_step"] += 1
        local = record["local_step"]
        record.update(global_step=global_step, loss=loss, time=now)
        if local == 1:
            record["first_step_time"] = now
        times = record["step_times"]
        if local == 1 or local % STEP_TIMES_EVERY == 0:
            times.append([local, now])
        if self._written_at is None or now - self._written_at[1] >= WRITE_EVERY_SECS:
            self.write()

    def saved(self, step: int, started: float, saved: float) -> None:
        """After each checkpoint this task saved: [step, started, saved] into `saves`, written at once (the
        evaluator may score the checkpoint before the next step's record). The newest MAX_SAVES are kept."""
        saves = self._record.setdefault("saves", [])
        saves.append([int(step), round(started, 3), round(saved, 3)])
        del saves[:-MAX_SAVES]
        self.write(done=self._record["done"])

    def note(self, **fields) -> None:
        """Adds fields to the record (e.g. preempted_at), written with the next write."""
        self._record.update(fields)

    def write(self, done: bool = False) -> None:
        record = self._record
        now, local = record["time"], record["local_step"]
        if self._written_at is not None and now is not None and now > self._written_at[1]:
            record["examples_per_sec"] = (local - self._written_at[0]) * self._examples_per_step / (now - self._written_at[1])
        record["done"] = done
        if self._path is not None:
            times = record["step_times"]
            newest = times + ([[local, now]] if local and (not times or times[-1][0] != local) else [])
            storage.write_json(self._path, {**record, "step_times": newest})
        self._written_at = (local, now if now is not None else self._clock())

    def finish(self, global_step: Optional[int]) -> None:
        if global_step is not None:
            self._record["global_step"] = global_step
        self.write(done=True)


def read_progress(records_dir: str) -> Dict[str, dict]:
    """Every task's latest record, keyed by task name ('worker:0'). A record that cannot be read now (removed
    between the listing and the read, a storage that failed this once) is skipped: the next look finds it."""
    records = {}
    folder = layout.progress_dir(records_dir)
    try:
        names = [name for name in storage.listdir(folder) if name.endswith(".json") and not name.startswith(".")]
    except OSError:
        return records
    for name in names:
        try:
            record = storage.read_json(storage.join(folder, name))
        except OSError:
            continue
        if record and "task" in record:
            records[record["task"]] = record
    return records



def fresh_rate(record: dict, now: float) -> Optional[float]:
    """A record's examples/s while it is recent (FRESH_SECS): an older one no longer says how fast the task runs."""
    if record.get("examples_per_sec") and record.get("time") and now - record["time"] <= FRESH_SECS:
        return record["examples_per_sec"]
    return None


def fresh_rates(records_dir: str, now: Optional[float] = None) -> Dict[str, float]:
    """Each trainer's current examples/s, from its recent record."""
    now = time.time() if now is None else now
    rates = {name: fresh_rate(record, now) for name, record in read_progress(records_dir).items()}
    return {name: rate for name, rate in rates.items() if rate}
