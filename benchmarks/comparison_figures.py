"""The Keras comparison's figures: from the progress records of one run to its `Run`, and ratios between runs.

Both systems write the same progress records (estimator_mnist.model_files.progress), so
one reading serves both: the wall-clock time of local step 1, of every
STEP_TIMES_EVERY-th step and of the last one, per task.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from estimator_mnist.model_files.progress import STEP_TIMES_EVERY, read_progress


@dataclasses.dataclass
class Run:
    system: str  # "trainer", "reference" or "trainer_defaults"
    workers: int
    batch: int
    precision: str
    images_per_sec: float
    seconds_to_first_step: float
    seconds_to_last_step: float
    seconds_to_exit: float
    accuracy: Optional[float]


def step_times(run_dir: Path) -> Dict[str, Dict[int, float]]:
    """{task: {local step: wall time}} of every trainer of the run."""
    return {task: {int(step): t for step, t in record["step_times"]}
            for task, record in read_progress(str(run_dir)).items()}


def window(steps: int, warmup: int) -> Tuple[int, int]:
    """Recorded steps (1, every STEP_TIMES_EVERY-th, the last) closest to [warmup, steps - warmup]."""
    every = STEP_TIMES_EVERY
    warmup = max(every, min(warmup, steps // 4) // every * every)
    end = max(warmup + every, (steps - warmup) // every * every)
    if end > steps:
        raise SystemExit(f"--steps {steps} is too few to measure a steady state; use at least {2 * every}")
    return warmup, end


def steady_images_per_sec(times: List[Dict[int, float]], batch: int, warmup: int, end: int) -> float:
    """Images/s summed over the workers, between local steps `warmup` and `end` of each."""
    return sum(batch * (end - warmup) / (t[end] - t[warmup]) for t in times)


def summarise(system: str, workers: int, batch: int, precision: str, launched: float, exited: float,
              run_dir: Path, span: Tuple[int, int], accuracy: Optional[float]) -> Run:
    """The figures of one run, timed from its launch; `span` is the steady window of local steps."""
    times = list(step_times(run_dir).values())
    if len(times) != workers:
        raise SystemExit(f"{len(times)} progress records in {run_dir}, expected one per worker ({workers})")
    return Run(system=system, workers=workers, batch=batch, precision=precision,
               images_per_sec=steady_images_per_sec(times, batch, *span),
               seconds_to_first_step=max(t[1] for t in times) - launched,
               seconds_to_last_step=max(max(t.values()) for t in times) - launched,
               seconds_to_exit=exited - launched, accuracy=accuracy)


def ratios(a: List[Optional[float]], b: List[Optional[float]]) -> List[float]:
    """a/b, pair by pair (the runs of a pair ran next to each other); pairs missing a figure are left out."""
    return [x / y for x, y in zip(a, b) if x is not None and y]


def paired(runs: List[Run], system_a: str, system_b: str, workers: int) -> List[float]:
    """Steady images/s of system_a over system_b, per repetition."""
    return ratios([r.images_per_sec for r in runs if r.system == system_a and r.workers == workers],
                  [r.images_per_sec for r in runs if r.system == system_b and r.workers == workers])


def stats(values: List[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
