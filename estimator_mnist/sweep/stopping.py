"""Early stopping: the median stopping rule of Google Vizier and Katib, as a pure function. No TensorFlow.

A running trial is stopped when its evaluated accuracy at a step is below
the median of the other trials' accuracy at that step, each taken as its
latest evaluation at or before the step, once at least MIN_TRIALS trials
(the judged one included) have reached it. Its latest step that enough
others reached is the one judged, so a trial is never stopped for an early
evaluation that it has since outgrown. The accuracy is the one the sweep
chooses by (trials.chooses_by): the validation split's, unless the trials
hold out none; the test accuracy is never judged when there is a split.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

MIN_TRIALS = 3
RULES = ("none", "median")

History = Sequence[Tuple[int, float]]  # (global step, accuracy), ascending steps
# The figures a sweep can stop and rank on, as the user reads them (records.py shows them too).
NAMES = {"validation_accuracy": "validation accuracy", "accuracy": "test accuracy"}


@dataclass(frozen=True)
class Verdict:
    step: int
    accuracy: float
    median: float
    others: int
    metric: str = "validation_accuracy"

    @property
    def reason(self) -> str:
        return (f"median rule: {NAMES[self.metric]} {self.accuracy:.4f} at step {self.step} is below the median "
                f"{self.median:.4f} of {self.others} other trials at that step")


def value_at(history: History, step: int) -> Optional[float]:
    """The latest accuracy evaluated at or before `step`."""
    value = None
    for at, accuracy in history:
        if at > step:
            break
        value = accuracy
    return value


def median_verdict(own: History, others: Dict[str, History], min_trials: int = MIN_TRIALS,
                   metric: str = "validation_accuracy") -> Optional[Verdict]:
    """A Verdict when `own` should stop, else None; `metric` names what the histories hold."""
    for step, accuracy in reversed(list(own)):
        peers: List[float] = []
        for history in others.values():
            if history and history[-1][0] >= step:  # this trial reached the step
                value = value_at(history, step)
                if value is not None:
                    peers.append(value)
        if len(peers) + 1 >= min_trials:
            median = statistics.median(peers)
            return Verdict(step, accuracy, median, len(peers), metric) if accuracy < median else None
    return None
