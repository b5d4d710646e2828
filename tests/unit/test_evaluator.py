"""The evaluator: every evaluation recorded, and the final checkpoint scored at once."""

import os
import threading
import types
import time

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.model_files.checkpoints import read_eval_results
from estimator_mnist.tf_task.evaluator import MSG_BEST_BY_TEST, SavedModelExporter, evaluate_checkpoints
from tests.unit.fakes import tiny_estimator


def _exporter(tmp_path, best_only, exported):
    def fake_export(model_config, checkpoint_path, export_base):
        exported.append(checkpoint_path)
        return f"/exports/{checkpoint_path}"

    return SavedModelExporter("latest", None, str(tmp_path / "eval_results.jsonl"), 3, best_only, fake_export)


def _result(step, loss):
    return {"global_step": np.int64(step), "accuracy": np.float32(0.5), "loss": np.float32(loss)}


def test_the_exporter_exports_and_records_each_evaluation(tmp_path):
    exported = []
    recorder = _exporter(tmp_path, False, exported)
    for step in (10, 20):
        assert recorder.export(None, str(tmp_path / "x"), f"ckpt-{step}", _result(step, 1.0), step == 20) \
            == f"/exports/ckpt-{step}"
    records = read_eval_results(str(tmp_path))
    assert [r["global_step"] for r in records] == [10, 20] and exported == ["ckpt-10", "ckpt-20"]
    assert records[-1]["final"] is True and records[-1]["export"] == "/exports/ckpt-20"


def test_the_best_exporter_exports_only_a_lower_loss_and_remembers_it_across_restarts(tmp_path):
    exported = []
    _exporter(tmp_path, True, exported).export(None, "x", "ckpt-10", _result(10, 1.0), False)
    restarted = _exporter(tmp_path, True, exported)  # a new process: the best loss comes from eval_results.jsonl
    assert restarted.export(None, "x", "ckpt-20", _result(20, 2.0), False) is None
    assert restarted.export(None, "x", "ckpt-30", _result(30, 0.5), True) == "/exports/ckpt-30"
    assert exported == ["ckpt-10", "ckpt-30"]
    assert [r["export"] for r in read_eval_results(str(tmp_path))] == ["/exports/ckpt-10", None, "/exports/ckpt-30"]


def test_evaluator_scores_new_checkpoints_and_the_final_one_without_waiting_out_the_throttle(tmp_path):
    config, estimator, train_spec, eval_spec = tiny_estimator(
        tmp_path, cluster={"chief": ["localhost:1"], "evaluator": "localhost"}, data={"validation_examples": 16},
        evaluation={"batch_size": 32, "throttle_secs": 3600, "start_delay_secs": 0})
    estimator.train(train_spec.input_fn, max_steps=2)
    done = threading.Event()
    evaluator = threading.Thread(target=lambda: (evaluate_checkpoints(estimator, eval_spec, 4, poll_secs=0.1),
                                                 done.set()))
    evaluator.start()
    deadline = time.time() + 60
    while not read_eval_results(config.model_dir) and time.time() < deadline:
        time.sleep(0.1)
    assert [r["global_step"] for r in read_eval_results(config.model_dir)] == [2]
    assert not done.is_set()  # step 2 is not the end of training
    estimator.train(train_spec.input_fn, max_steps=4)
    final_saved = time.time()
    assert done.wait(60), "the evaluator did not stop after the final checkpoint"
    # The hour-long throttle delayed nothing: the final checkpoint is scored at once.
    assert time.time() - final_saved < 30
    records = read_eval_results(config.model_dir)
    assert [r["global_step"] for r in records] == [2, 4]
    assert records[-1]["final"] is True and os.path.isdir(records[-1]["export"])
    assert all(0 <= r["validation_accuracy"] <= 1 and r["validation_loss"] > 0 for r in records)  # the task scores both
    # Each record says when its evaluation began (the save -> evaluation gap of benchmarks/time_to_accuracy.py).
    assert all(r["started"] <= r["time"] for r in records) and records[1]["started"] >= os.path.getmtime(
        os.path.join(config.model_dir, "model.ckpt-4.index"))
    evaluator.join()


class ScriptedEstimator:
    """Answers the exporter's validation evaluation with scripted losses; writes TensorBoard events in `model_dir`.
    `scorer` stands for KeptEvaluation: the exporter builds one per split and asks it for each checkpoint."""

    def __init__(self, model_dir, losses):
        self.model_dir, self.losses, self.calls, self.scorers = str(model_dir), list(losses), [], []

    def scorer(self, estimator, input_fn, name):
        assert estimator is self
        self.scorers.append((input_fn, name))
        return types.SimpleNamespace(evaluate=lambda path: self.evaluate(input_fn, None, path, name))

    def evaluate(self, input_fn, steps, checkpoint_path, name):
        self.calls.append((input_fn, steps, checkpoint_path, name))
        return {"accuracy": np.float32(0.75), "loss": np.float32(self.losses.pop(0)), "global_step": np.int64(1)}

    def eval_dir(self):
        return os.path.join(self.model_dir, "eval")


def test_with_a_split_best_exports_on_the_validation_loss_never_the_test_loss(tmp_path, capsys):
    exported = []
    estimator = ScriptedEstimator(tmp_path, [0.3, 0.4, 0.5])
    recorder = SavedModelExporter("best", None, str(tmp_path / "eval_results.jsonl"), 3, True,
                                  _exporter(tmp_path, True, exported)._export_fn,
                                  validation_input_fn="the validation input_fn", scorer=estimator.scorer)
    # The test loss falls at every step, the validation loss rises after step 10: only step 10 is exported.
    for step, test_loss in ((10, 1.0), (20, 0.5), (30, 0.1)):
        recorder.export(estimator, "x", f"ckpt-{step}", _result(step, test_loss), step == 30)
    assert exported == ["ckpt-10"]
    assert estimator.scorers == [("the validation input_fn", "validation")]  # one scorer, kept for every checkpoint
    assert [c[2:] for c in estimator.calls] == [(f"ckpt-{s}", "validation") for s in (10, 20, 30)]
    records = read_eval_results(str(tmp_path))
    assert [(r["accuracy"], r["loss"]) for r in records] == [(0.5, 1.0), (0.5, 0.5), (0.5, pytest.approx(0.1))]
    assert [(r["validation_accuracy"], r["validation_loss"]) for r in records] == \
        [(0.75, pytest.approx(0.3)), (0.75, pytest.approx(0.4)), (0.75, pytest.approx(0.5))]
    logged = capsys.readouterr().err
    assert "test_accuracy=0.5000 test_loss=1.0000 validation_accuracy=0.7500 validation_loss=0.3000" in logged
    assert MSG_BEST_BY_TEST not in logged
    tags = {v.tag for path in (tmp_path / "eval").iterdir() for event in tf.compat.v1.train.summary_iterator(str(path))
            for v in event.summary.value}
    assert tags == {"validation_accuracy", "validation_loss"}


def test_without_a_split_best_says_once_that_it_picks_by_test_loss(tmp_path, capsys):
    recorder = _exporter(tmp_path, True, [])
    for step in (10, 20):
        recorder.export(None, "x", f"ckpt-{step}", _result(step, 1.0 / step), False)
    assert capsys.readouterr().err.count(MSG_BEST_BY_TEST) == 1
    assert all("validation_accuracy" not in r for r in read_eval_results(str(tmp_path)))


def test_the_one_process_job_scores_the_validation_split_and_the_test_set_at_each_evaluation(tmp_path):
    config, estimator, train_spec, eval_spec = tiny_estimator(
        tmp_path, data={"validation_examples": 16}, evaluation={"batch_size": 32, "throttle_secs": 0})
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)  # the sweep trials' path
    records = read_eval_results(config.model_dir)
    assert records and records[-1]["global_step"] == 4 and records[-1]["final"]
    for record in records:
        assert 0 <= record["accuracy"] <= 1 and 0 <= record["validation_accuracy"] <= 1
        assert record["loss"] > 0 and record["validation_loss"] > 0
    assert os.path.isdir(os.path.join(config.model_dir, "eval_validation"))  # Estimator's own events of the split


def test_a_checkpoint_the_chief_s_saver_removes_while_it_is_evaluated_is_skipped_for_the_newest(tmp_path, capsys):
    """The evaluator chose step 2; before it restored it, the chief saved step 4 and, keeping one checkpoint, TF's
    saver deleted step 2 (a Slurm e2e run: 5 newer saves during one slow evaluation). It goes on with step 4."""
    from estimator_mnist.tf_task.kept_evaluation import KeptEvaluation

    config, estimator, train_spec, eval_spec = tiny_estimator(
        tmp_path, training={"batch_size_per_replica": 8, "max_steps": 4, "save_checkpoints_steps": 2,
                            "keep_checkpoint_max": 1},
        data={"validation_examples": 16}, evaluation={"batch_size": 32, "throttle_secs": 3600})
    estimator.train(train_spec.input_fn, max_steps=2)

    class OvertakenAtFirst(KeptEvaluation):
        def evaluate(self, checkpoint_path):
            if checkpoint_path.endswith("model.ckpt-2"):
                estimator.train(train_spec.input_fn, max_steps=4)  # the chief's save of 4 removes 2
                assert not os.path.exists(checkpoint_path + ".index")
            return super().evaluate(checkpoint_path)

    result = evaluate_checkpoints(estimator, eval_spec, 4, poll_secs=0.1, scorer=OvertakenAtFirst)
    assert int(result["global_step"]) == 4
    records = read_eval_results(config.model_dir)
    assert [(r["global_step"], r["final"]) for r in records] == [(4, True)] and os.path.isdir(records[0]["export"])
    assert (f"evaluation: {config.model_dir}/model.ckpt-2 was removed by the chief's saver (training."
            "keep_checkpoint_max: 1 newer checkpoints were saved) before it was evaluated") in capsys.readouterr().err


def test_a_checkpoint_removed_before_its_export_is_recorded_unexported_and_any_other_failure_raises(tmp_path, capsys):
    config, estimator, train_spec, eval_spec = tiny_estimator(
        tmp_path, training={"batch_size_per_replica": 8, "max_steps": 6, "save_checkpoints_steps": 2,
                            "keep_checkpoint_max": 2})
    (exporter,) = eval_spec.exporters
    base = os.path.join(config.model_dir, "export", exporter.name)
    estimator.train(train_spec.input_fn, max_steps=6)  # keeps 4 and 6; 2 was removed
    removed = os.path.join(config.model_dir, "model.ckpt-2")
    assert exporter.export(estimator, base, removed, _result(2, 1.0), False) is None
    [record] = read_eval_results(config.model_dir)
    assert (record["global_step"], record["export"]) == (2, None)
    assert "model.ckpt-2 was removed by the chief's saver" in capsys.readouterr().err
    with pytest.raises(ValueError):  # the final checkpoint is never rotated away: its absence is an error
        exporter.export(estimator, base, removed, _result(2, 1.0), True)
    newest = os.path.join(config.model_dir, "model.ckpt-6")
    for name in os.listdir(config.model_dir):
        if name.startswith("model.ckpt-6."):
            os.remove(os.path.join(config.model_dir, name))  # gone, but nothing newer: not the saver's rotation
    with pytest.raises(ValueError):
        exporter.export(estimator, base, newest, _result(6, 1.0), False)
    assert len(read_eval_results(config.model_dir)) == 1
