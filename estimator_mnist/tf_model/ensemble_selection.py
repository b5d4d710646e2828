"""Greedy ensemble selection with replacement (Caruana, Niculescu-Mizil, Crew and Ksikes, "Ensemble Selection from
Libraries of Models", ICML 2004), on fixed member predictions. Pure numpy: no TensorFlow.

Start from the single best candidate; then, again and again, add the
candidate (one already in the ensemble included) whose addition gives the
highest accuracy of the weighted average of probabilities, as long as that
accuracy is strictly higher than the ensemble's so far. A candidate picked
k times has weight k. The result's accuracy on the selection data is thus
never below that of the best candidate, by construction; a candidate that
only hurts is never picked, and one that helps a little is picked once
beside a strong one picked several times (a low weight).

Ties between candidates go to the lower log loss of the resulting average,
then to the earlier candidate (the sweep's ranking order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

TINY = np.finfo(np.float32).tiny


@dataclass(frozen=True)
class Selection:
    counts: Tuple[int, ...]          # per candidate: how many times it was picked (its weight); 0 = left out
    steps: Tuple[Tuple[int, float], ...]  # (candidate picked, accuracy after the pick), in order
    accuracy: float                  # of the selected ensemble, on the selection data
    best_single: int                 # the candidate the selection started from


def _accuracy_and_loss(probabilities: np.ndarray, labels: np.ndarray) -> Tuple[float, float]:
    accuracy = float(np.mean(np.argmax(probabilities, axis=1) == labels))
    loss = float(-np.mean(np.log(np.maximum(probabilities[np.arange(len(labels)), labels], TINY))))
    return accuracy, loss


def greedy_selection(probabilities: Sequence[np.ndarray], labels: np.ndarray) -> Selection:
    """Selects among candidates whose class probabilities ([N, classes] each) on the same N examples are given."""
    if not probabilities:
        raise ValueError("greedy_selection needs at least one candidate")
    labels = np.asarray(labels)
    candidates = [np.asarray(p, dtype=np.float64) for p in probabilities]

    def best_of(total: np.ndarray, picks: int) -> Tuple[int, float]:
        scored: List[Tuple[float, float, int]] = []
        for index, candidate in enumerate(candidates):
            accuracy, loss = _accuracy_and_loss((total + candidate) / (picks + 1), labels)
            scored.append((-accuracy, loss, index))
        negative_accuracy, _, index = min(scored)
        return index, -negative_accuracy

    counts = [0] * len(candidates)
    first, accuracy = best_of(np.zeros_like(candidates[0]), 0)
    counts[first], total, steps = 1, candidates[first].copy(), [(first, accuracy)]
    while True:
        index, improved = best_of(total, sum(counts))
        if improved <= accuracy:
            break
        counts[index] += 1
        total += candidates[index]
        accuracy = improved
        steps.append((index, accuracy))
    return Selection(tuple(counts), tuple(steps), accuracy, first)
