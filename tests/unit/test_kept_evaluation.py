"""The kept evaluation session: Estimator.evaluate's figures and events for each checkpoint, one graph for all."""

import os

import pytest
import tensorflow as tf

from estimator_mnist.tf_task.kept_evaluation import ERR_HOOKS, KeptEvaluation
from tests.unit.fakes import tiny_estimator


def _events(eval_dir):
    """{step: {tag: value}} of every scalar in eval_dir's events files."""
    found = {}
    for name in os.listdir(eval_dir):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(eval_dir, name)):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    found.setdefault(event.step, {})[value.tag] = value.simple_value
    return found


def test_each_checkpoint_scores_as_estimator_evaluate_scores_it_with_the_moving_average(tmp_path):
    config, estimator, train_spec, eval_spec = tiny_estimator(tmp_path, training={
        "batch_size_per_replica": 8, "max_steps": 6, "save_checkpoints_steps": 2})
    assert config.model.weight_average_decay  # the scaffold restores the averages in the weights' place
    estimator.train(train_spec.input_fn, max_steps=6)
    paths = [os.path.join(config.model_dir, f"model.ckpt-{step}") for step in (2, 4, 6)]
    expected = [estimator.evaluate(eval_spec.input_fn, checkpoint_path=path, name="fresh") for path in paths]
    kept = KeptEvaluation(estimator, eval_spec.input_fn)
    try:
        # Out of order, and one twice: each restore replaces the variables, each pass starts the metrics afresh.
        for index in (1, 0, 2, 2):
            result = kept.evaluate(paths[index])
            assert result["global_step"] == expected[index]["global_step"]
            assert result["accuracy"] == pytest.approx(expected[index]["accuracy"], abs=1e-6)
            assert result["loss"] == pytest.approx(expected[index]["loss"], rel=1e-5)
    finally:
        kept.close()
    events = _events(estimator.eval_dir())  # Estimator's own tags in <model_dir>/eval, one per step
    for index, step in enumerate((2, 4, 6)):
        assert events[step]["accuracy"] == pytest.approx(expected[index]["accuracy"], abs=1e-6)
        assert events[step]["loss"] == pytest.approx(expected[index]["loss"], rel=1e-5)


def test_the_graph_and_the_threads_stay_as_they_are_over_many_evaluations(tmp_path):
    config, estimator, train_spec, eval_spec = tiny_estimator(tmp_path)
    estimator.train(train_spec.input_fn, max_steps=2)
    kept = KeptEvaluation(estimator, eval_spec.input_fn, name="validation")
    path = os.path.join(config.model_dir, "model.ckpt-2")
    try:
        kept.evaluate(path)
        # Every thread of the process, TensorFlow's pools included (threading counts Python's only).
        operations, threads = len(kept._graph.get_operations()), len(os.listdir("/proc/self/task"))
        for _ in range(20):
            kept.evaluate(path)
        assert kept._graph.finalized and len(kept._graph.get_operations()) == operations
        # A thread left per evaluation would add 20; the pools of TensorFlow and of the other tests sharing this
        # pytest worker may start one or two on their own meanwhile.
        assert len(os.listdir("/proc/self/task")) - threads <= 2
    finally:
        kept.close()
    assert os.path.isdir(os.path.join(config.model_dir, "eval_validation"))


def test_evaluation_hooks_are_refused_by_name(tmp_path):
    _, estimator, _, eval_spec = tiny_estimator(tmp_path)
    hook = tf.compat.v1.train.StopAtStepHook(last_step=1)
    with pytest.raises(ValueError) as raised:
        KeptEvaluation(estimator, eval_spec.input_fn, hooks=[hook])
    assert str(raised.value) == ERR_HOOKS.format(hooks="StopAtStepHook")
