"""benchmarks/time_to_accuracy.py: the time to 99.2% split from the run's records, and every save -> start gap."""

import sys

import pytest

from tests.helpers import REPO

sys.path.append(str(REPO / "benchmarks"))
from time_to_accuracy import split_of  # noqa: E402  (benchmarks/ is not a package)

FIRST_STEP = 1000.0
# The chief's `saves` ([step, started, saved]) and the evaluator's records (eval_results.jsonl).
SAVES = [[120, 1010.0, 1010.1], [240, 1020.0, 1020.2], [300, 1025.0, 1025.1]]
EVALUATIONS = [{"global_step": 120, "accuracy": 0.9915, "started": 1010.15, "time": 1012.0},
               {"global_step": 240, "accuracy": 0.992, "started": 1020.25, "time": 1023.0},
               {"global_step": 300, "accuracy": 0.9944, "started": 1025.12, "time": 1026.5}]


def test_the_first_evaluation_at_or_above_992_is_split_into_training_save_wait_and_evaluation():
    split = split_of(EVALUATIONS, SAVES, FIRST_STEP)
    assert (split["training"], split["save"], split["wait"], split["evaluation"]) == \
        pytest.approx((20.0, 0.2, 0.05, 2.75))  # step 240: 0.992 counts, step 120's 0.9915 does not
    assert split["gaps"] == pytest.approx([0.05, 0.05, 0.02])  # each evaluation's start after its save


def test_a_run_that_never_reached_992_has_no_split_but_still_its_gaps():
    below = [{**record, "accuracy": 0.99} for record in EVALUATIONS]
    split = split_of(below, SAVES, FIRST_STEP)
    assert [split[part] for part in ("training", "save", "wait", "evaluation")] == [None] * 4
    assert len(split["gaps"]) == 3
