"""The median stopping rule, a trial's YAML, and the sweep's records: resuming, refusing another sweep,
sweep.csv, best.yaml and the ensemble's members (no TensorFlow, no processes)."""

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from estimator_mnist.tf_model import ensemble_plan
from estimator_mnist.config import TaskId, config_from_dict, load_config
from estimator_mnist.errors import UsageError
from estimator_mnist.sweep import records
from estimator_mnist.sweep.run import build_plan
from estimator_mnist.sweep.devices import Device
from estimator_mnist.sweep.stopping import median_verdict, value_at
from estimator_mnist.sweep.trials import trial_data, trial_spec, with_gpus, write_trial_yaml
from estimator_mnist.plan.task_plan import plan_task
from tests.helpers import REPO, error_pattern

LOCAL = REPO / "config" / "local.yaml"


def test_value_at_a_step_is_the_latest_evaluation_at_or_before_it():
    history = [(100, 0.9), (200, 0.95), (300, 0.97)]
    assert value_at(history, 50) is None
    assert value_at(history, 250) == 0.95
    assert value_at(history, 300) == 0.97


def test_a_trial_below_the_median_of_the_others_at_its_step_is_stopped_with_the_reason():
    others = {"a": [(100, 0.95), (200, 0.97)], "b": [(100, 0.96), (200, 0.98)], "c": [(100, 0.90), (200, 0.99)]}
    verdict = median_verdict([(100, 0.50), (200, 0.60)], others)
    assert (verdict.step, verdict.accuracy, verdict.median, verdict.others) == (200, 0.60, 0.98, 3)
    assert "0.6000 at step 200 is below the median 0.9800 of 3 other trials" in verdict.reason


def test_a_trial_at_or_above_the_median_runs_on():
    others = {"a": [(100, 0.95)], "b": [(100, 0.97)]}
    assert median_verdict([(100, 0.96)], others) is None
    assert median_verdict([(100, 0.97)], others) is None


def test_too_few_trials_at_the_step_decide_nothing():
    assert median_verdict([(100, 0.1)], {"a": [(100, 0.99)]}) is None  # two trials reached step 100
    # The others have not reached step 200 yet: the latest comparable step, 100, is judged.
    others = {"a": [(100, 0.97)], "b": [(100, 0.98)]}
    assert median_verdict([(100, 0.99), (200, 0.10)], others) is None
    assert median_verdict([(100, 0.10), (200, 0.99)], others).step == 100


def test_a_trial_judged_on_its_latest_comparable_step_is_not_stopped_for_an_early_one():
    others = {"a": [(100, 0.9), (200, 0.95)], "b": [(100, 0.9), (200, 0.95)]}
    assert median_verdict([(100, 0.5), (200, 0.96)], others) is None


def test_a_trial_is_one_process_with_its_own_directories_and_device(tmp_path):
    base = {"cluster": {"chief": ["h:1"], "worker": ["h:2"], "evaluator": "h"}, "strategy": "multi_worker_mirrored",
            "tasks": {"all": {"intra_op_threads": 1}, "worker:1": {"step_delay_ms": 500}},
            "model": {"learning_rate": 0.01}}
    data = trial_data(base, {"model.learning_rate": 0.003}, tmp_path / "t", "/data")
    assert data["cluster"] == {"chief": ["localhost:2222"]} and data["strategy"] == "one_device"
    assert data["tasks"] == {"all": {"intra_op_threads": 1}}  # no device: that is the spec's, where it runs
    assert with_gpus(data, [])["tasks"] == {"all": {"intra_op_threads": 1, "gpus": []}}
    assert data["model"]["learning_rate"] == 0.003 and base["model"]["learning_rate"] == 0.01
    assert data["model_dir"] == str(tmp_path / "t" / "model") and data["run_dir"] == str(tmp_path / "t")
    assert with_gpus(data, [3])["tasks"]["all"]["gpus"] == [3] and with_gpus(data, None) == data


def _plan(tmp_path, params=("model.learning_rate=0.001,0.003",), **kw):
    return build_plan(str(LOCAL), list(params), sweep_dir=str(tmp_path / "sweep"), allowed=[0, 1], gpus=[], **kw)


def test_every_trial_yaml_is_a_valid_single_process_config(tmp_path):
    plan = _plan(tmp_path)
    for trial in plan.trials:
        config = load_config(write_trial_yaml(trial))
        assert config.strategy.name == "one_device" and [str(t) for t in config.cluster.tasks()] == ["chief:0"]
        assert config.model_dir == str(trial.model_dir)


def test_a_gpu_trial_sees_only_its_gpu_and_a_cpu_trial_none_with_threads_from_its_cores(tmp_path):
    trial = _plan(tmp_path).trials[0]
    on_gpu = trial_spec(trial, gpus=[1], cpu_set=range(8)).plan
    assert dict(on_gpu.env)["CUDA_VISIBLE_DEVICES"] == "1" and on_gpu.task == TaskId("chief", 0)
    on_cpu = trial_spec(trial, gpus=[], cpu_set=[1]).plan
    assert dict(on_cpu.env)["CUDA_VISIBLE_DEVICES"] == "-1"
    assert on_cpu.intra_op_threads == 1  # the trial's cores are what its threads follow
    assert on_cpu.in_graph and on_cpu.evaluates_itself and on_cpu.tf_config is None


def test_under_slurm_a_trial_takes_slurm_s_gpus_unmasked_and_threads_from_its_cpus(tmp_path):
    trial = _plan(tmp_path).trials[0]
    plan = trial_spec(trial, own_cpus=3, gpus_from_manager=True, cpu_set=range(8)).plan
    assert "CUDA_VISIBLE_DEVICES" not in dict(plan.env)  # Slurm's own mask stands
    assert plan.intra_op_threads == 3 and plan.cpus is None


def test_a_bad_combination_is_refused_before_any_trial_starts(tmp_path):
    # A checkpoint cadence longer than the run is refused for the trial that has it.
    with pytest.raises(UsageError, match="trial-001"):
        _plan(tmp_path, ("training.max_steps=400,50",))


def _record(tmp_path, states_and_accuracies):
    plan = _plan(tmp_path, (f"model.dropout={','.join(str(i / 10) for i in range(len(states_and_accuracies)))}",))
    record = records.load_or_start(plan.sweep_dir, plan.identity, [t.values for t in plan.trials])
    for row, (state, accuracy) in zip(record["trials"], states_and_accuracies):
        row.update(state=state, accuracy=accuracy)
    return plan, record


def test_the_same_sweep_resumes_and_another_is_refused(tmp_path):
    plan, record = _record(tmp_path, [("finished", 0.9), ("running", 0.5)])
    records.save(plan.sweep_dir, record)
    again = records.load_or_start(plan.sweep_dir, plan.identity, [t.values for t in plan.trials])
    assert [r["state"] for r in again["trials"]] == ["finished", "running"]
    other = _plan(tmp_path, ("model.dropout=0.0,0.2",))
    with pytest.raises(UsageError, match=error_pattern(records.ERR_OTHER_SWEEP)) as info:
        records.load_or_start(other.sweep_dir, other.identity, [t.values for t in other.trials])
    assert "--param" in str(info.value)
    reseeded = _plan(tmp_path, ("model.dropout=0.0,0.1",), seed=3)
    with pytest.raises(UsageError, match="--seed"):
        records.load_or_start(reseeded.sweep_dir, reseeded.identity, [])


def test_csv_has_a_row_per_trial_and_best_yaml_is_the_base_with_the_best_values(tmp_path):
    plan, record = _record(tmp_path, [("finished", 0.91), ("stopped", 0.5), ("finished", 0.97), ("failed", None)])
    best = records.write_results(plan.sweep_dir, record, plan.thresholds, plan.base_data, str(LOCAL),
                                 {t.name: t.batch for t in plan.trials})
    rows = list(csv.DictReader(io.StringIO((Path(plan.sweep_dir) / records.CSV_FILE).read_text())))
    assert [r["state"] for r in rows] == ["finished", "stopped", "finished", "failed"]
    assert [json.loads(r["model.dropout"]) for r in rows] == [0.0, 0.1, 0.2, 0.3]
    assert record["best"] == "trial-002"
    text = Path(best).read_text()
    assert "tuned in ONE process" in text and "global batch 256" in text
    config = config_from_dict(yaml.safe_load(text), str(best))
    assert config.model.dropout == 0.2
    assert config.cluster == load_config(LOCAL).cluster  # the base's cluster is kept


def test_ensemble_members_are_the_best_finished_trials_and_too_many_are_refused(tmp_path):
    plan, record = _record(tmp_path, [("finished", 0.91), ("stopped", 0.99), ("finished", 0.97)])
    assert [t["trial"] for t in records.top_trials(record, plan.sweep_dir, 2)] == ["trial-002", "trial-000"]
    with pytest.raises(UsageError, match=error_pattern(records.ERR_TOP)) as info:
        records.top_trials(record, plan.sweep_dir, 3)
    assert "has 2 finished trial(s) (and 1 stopped)" in str(info.value)


def test_ensemble_refusals_come_before_tensorflow(tmp_path):
    with pytest.raises(UsageError, match=error_pattern(records.ERR_NOT_A_SWEEP)):
        ensemble_plan.plan_ensemble(str(tmp_path), 2)
    plan, record = _record(tmp_path, [("finished", 0.91), ("finished", 0.97)])
    records.save(plan.sweep_dir, record)
    with pytest.raises(UsageError, match=error_pattern(ensemble_plan.ERR_TRIAL_GONE)):
        ensemble_plan.plan_ensemble(str(plan.sweep_dir), 2, gpus=[])
    for trial in plan.trials:
        write_trial_yaml(trial)
    with pytest.raises(UsageError, match=error_pattern(ensemble_plan.ERR_TRIAL_GONE)) as info:
        ensemble_plan.plan_ensemble(str(plan.sweep_dir), 2, gpus=[])
    assert "a checkpoint in" in str(info.value)
    for text, template in (("cpu0", ensemble_plan.ERR_DEVICE), ("gpu:1", ensemble_plan.ERR_GPU)):
        with pytest.raises(UsageError, match=error_pattern(template)):
            ensemble_plan.parse_devices(text, [0])
    assert ensemble_plan.parse_devices("gpu:0,cpu:1", [0]) == ["/device:GPU:0", "/device:CPU:1"]
