"""Greedy ensemble selection with replacement (Caruana et al., ICML 2004) on fixed member predictions: it starts
from the best member, never ends below it, leaves out a member that only hurts, and repeats a member to weight it."""

from typing import Sequence

import numpy as np
import pytest

from estimator_mnist.tf_model.ensemble_selection import greedy_selection


def weighted_average(probabilities: Sequence[np.ndarray], counts: Sequence[int]) -> np.ndarray:
    """The ensemble's probabilities: each candidate's weighted by its count, as the exported graph averages them
    (tf_model/ensemble.py)."""
    total = sum(count * np.asarray(p, dtype=np.float64) for p, count in zip(probabilities, counts) if count)
    return total / float(sum(counts))


def two_class(correct):
    """[N, 2] probabilities of examples whose label is 0, from each example's probability of that label."""
    correct = np.asarray(correct, dtype=np.float64)
    return np.stack([correct, 1 - correct], axis=1)


LABELS = np.zeros(11, dtype=np.int64)
# Six easy examples; two that A gets wrong and B right; one that only a 2:1 average of A and B gets right;
# two that B gets wrong and A right even when averaged 1:1.
A = two_class([0.9] * 6 + [0.45] * 2 + [0.7] + [0.9] * 2)    # 9 of 11
B = two_class([0.9] * 6 + [0.7] * 2 + [0.15] + [0.2] * 2)    # 8 of 11
WEAK = two_class([0.05] * 11)                                 # 0 of 11, and confident


def test_a_weak_member_is_left_out_and_a_repeated_pick_weights_the_stronger_one():
    selection = greedy_selection([WEAK, B, A], LABELS)
    assert selection.best_single == 2  # A, the best alone, is where it starts
    # A + B fixes A's two errors (10 of 11); A + A + B also gets the example only a 2:1 average gets (11 of 11).
    assert selection.steps == ((2, 9 / 11), (1, 10 / 11), (2, 1.0))
    assert selection.counts == (0, 1, 2) and selection.accuracy == 1.0
    average = weighted_average([WEAK, B, A], selection.counts)
    np.testing.assert_allclose(average, (B + 2 * A) / 3)
    assert np.mean(np.argmax(average, axis=1) == LABELS) == 1.0


def test_when_nothing_improves_the_best_member_it_stands_alone():
    selection = greedy_selection([A, WEAK], LABELS)
    assert selection.counts == (1, 0) and selection.accuracy == pytest.approx(9 / 11)


def test_ties_go_to_the_lower_log_loss_then_to_the_earlier_candidate():
    sure, unsure = two_class([0.9] * 4), two_class([0.6] * 4)
    labels = np.zeros(4, dtype=np.int64)
    assert greedy_selection([unsure, sure], labels).best_single == 1  # same accuracy, lower loss
    assert greedy_selection([sure, sure.copy()], labels).best_single == 0


@pytest.mark.parametrize("seed", range(5))
def test_the_selection_is_never_below_its_best_member_on_the_data_it_chose_on(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, 200)
    members = []
    for skill in (0.9, 0.7, 0.5, 0.1):
        logits = rng.normal(size=(200, 10))
        logits[np.arange(200), labels] += 4 * skill
        members.append(np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True))
    best = max(np.mean(np.argmax(m, axis=1) == labels) for m in members)
    selection = greedy_selection(members, labels)
    achieved = np.mean(np.argmax(weighted_average(members, selection.counts), axis=1) == labels)
    assert achieved == pytest.approx(selection.accuracy) and achieved >= best
