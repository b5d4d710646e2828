"""A sweep chooses on the validation split and only reports the test set: each trial holds out 5,000 images
unless told otherwise, and the median rule, sweep.csv's ranking, best.yaml and `ensemble --top` read the
validation accuracy. The test accuracy is made to run against it here, so that a choice made on it would show."""

import csv
import io
import json
from pathlib import Path

import pytest

from estimator_mnist.tf_model import ensemble_plan
from estimator_mnist.errors import UsageError
from estimator_mnist.sweep import records, run, trials
from estimator_mnist.sweep.stopping import median_verdict
from tests.helpers import REPO, error_pattern

LOCAL = REPO / "config" / "local.yaml"
# (state, validation accuracy, test accuracy): trial-002 is best on validation, trial-000 on test.
ROWS = [("finished", 0.950, 0.990), ("stopped", 0.999, 0.999), ("finished", 0.980, 0.960), ("finished", 0.970, 0.970)]


def _plan(tmp_path, params=("model.dropout=0.0,0.1,0.2,0.3",), held_out=None):
    base = LOCAL
    if held_out is not None:  # the base YAML sets data.validation_examples itself
        base = tmp_path / f"held-out-{held_out}.yaml"
        base.write_text(LOCAL.read_text() + f"\ndata: {{validation_examples: {held_out}}}\n")
    return run.build_plan(str(base), list(params), sweep_dir=str(tmp_path / "sweep"), allowed=[0, 1], gpus=[])


def _record(tmp_path):
    plan = _plan(tmp_path)
    record = records.load_or_start(plan.sweep_dir, plan.identity, [t.values for t in plan.trials])
    record["ranked_by"] = plan.ranked_by
    for row, (state, validation, test) in zip(record["trials"], ROWS):
        row.update(state=state, validation_accuracy=validation, accuracy=test)
    return plan, record


def test_a_trial_holds_out_5000_images_unless_the_base_says_otherwise(tmp_path):
    plan = _plan(tmp_path)
    assert [t.validation_examples for t in plan.trials] == [5000] * 4
    assert plan.ranked_by == "validation_accuracy" and trials.chooses_by(plan.trials[0]) == "validation_accuracy"
    assert plan.trials[0].data["data"] == {"validation_examples": 5000}
    assert [t.validation_examples for t in _plan(tmp_path, held_out=2000).trials] == [2000] * 4
    none = _plan(tmp_path, held_out=0)  # the user's 0 stands: the sweep then ranks on the test set, and says so
    assert none.trials[0].validation_examples == 0 and none.ranked_by == "accuracy"
    with pytest.raises(UsageError, match="data.validation_examples: data.* is not swept"):
        _plan(tmp_path, ("data.validation_examples=0,5000",))  # one split for every trial, or none


def test_ranking_csv_and_best_yaml_follow_the_validation_accuracy(tmp_path):
    plan, record = _record(tmp_path)
    assert [t["trial"] for t in records.best_trials(record)] == ["trial-002", "trial-003", "trial-000"]
    best = records.write_results(plan.sweep_dir, record, plan.thresholds, plan.base_data, str(LOCAL),
                                 {t.name: t.batch for t in plan.trials})
    assert record["best"] == "trial-002"
    rows = list(csv.DictReader(io.StringIO((Path(plan.sweep_dir) / records.CSV_FILE).read_text())))
    assert [(r["validation_accuracy"], r["test_accuracy"], r["rank"]) for r in rows] == [
        ("0.95", "0.99", "3"), ("0.999", "0.999", ""), ("0.98", "0.96", "1"), ("0.97", "0.97", "2")]
    assert {r["ranked_by"] for r in rows} == {"validation_accuracy"}
    text = Path(best).read_text()
    assert "validation accuracy 0.9800 (chose), test accuracy 0.9600" in text
    assert "the test accuracy is reported, not chosen on" in text
    assert json.loads(json.dumps(record))["ranked_by"] == "validation_accuracy"


def test_a_sweep_without_splits_ranks_on_the_test_accuracy_and_says_so(tmp_path):
    plan, record = _record(tmp_path)
    record["ranked_by"] = "accuracy"
    assert records.best_trials(record)[0]["trial"] == "trial-000"
    text = records.best_yaml(plan.base_data, str(LOCAL), records.best_trials(record)[0], plan.sweep_dir, 256,
                             "accuracy")
    assert "test accuracy 0.9900 (chose)" in text and "Chosen on the TEST accuracy" in text


def test_ensemble_top_k_takes_the_k_best_on_validation(tmp_path):
    _, record = _record(tmp_path)
    assert [t["trial"] for t in records.top_trials(record, tmp_path, 2)] == ["trial-002", "trial-003"]


def test_the_greedy_ensemble_of_a_sweep_without_splits_is_refused_before_tensorflow(tmp_path):
    plan, record = _record(tmp_path)
    record["ranked_by"] = "accuracy"
    records.save(plan.sweep_dir, record)
    with pytest.raises(UsageError, match=error_pattern(ensemble_plan.ERR_NO_SPLIT)):
        ensemble_plan.plan_ensemble(str(plan.sweep_dir), gpus=[])


def test_the_stopping_rule_reads_each_trial_s_validation_accuracy(tmp_path):
    plan = _plan(tmp_path)
    for trial, (_, validation, test) in zip(plan.trials, ROWS):
        Path(trial.model_dir).mkdir(parents=True)
        (Path(trial.model_dir) / "eval_results.jsonl").write_text("".join(
            json.dumps({"global_step": step, "accuracy": test, "loss": 0.1, "validation_accuracy": validation,
                        "validation_loss": 0.1}) + "\n" for step in (10, 20)))
    histories = {t.name: trials.evaluations(t) for t in plan.trials}
    assert histories["trial-000"] == [(10, 0.95), (20, 0.95)]
    others = {name: h for name, h in histories.items() if name != "trial-000"}
    verdict = median_verdict(histories["trial-000"], others, metric=plan.ranked_by)
    # On the test set trial-000 is the best (0.99) and would run on; on validation it is below the median.
    assert verdict is not None and verdict.median == 0.98
    assert verdict.reason.startswith("median rule: validation accuracy 0.9500 at step 20 is below the median")
    assert median_verdict(histories["trial-002"], {n: h for n, h in histories.items() if n != "trial-002"},
                          metric=plan.ranked_by) is None
    assert trials.live(plan.trials[0].directory)["validation_accuracy"] == 0.95
