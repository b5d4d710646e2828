"""A task's role runs with AutoGraph off (tf_workarounds.without_autograph): under a strategy TF 2.15's
`call_for_each_replica` converted Estimator's own `_call_model_fn` and its scaffold's functions at every trainer's
start, and left each one's source in the temporary directory, since tasks end with os._exit and only an atexit
hook removes them."""

import contextlib
import glob
import tempfile

import tensorflow as tf

from estimator_mnist.config import TaskId
from estimator_mnist.tf_task.runner import build_estimator
from estimator_mnist.tf_task.tf_workarounds import without_autograph
from tests.helpers import planned, record_autograph_conversions
from tests.unit.fakes import tiny_estimator

GENERATED = "__autograph_generated_file*.py"


def train_under_a_strategy(tmp_path, monkeypatch, off: bool):
    """(functions AutoGraph converted, files it left) for 2 steps of a chief-only run under MirroredStrategy."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    converted = record_autograph_conversions(monkeypatch)
    config, _, train_spec, _ = tiny_estimator(tmp_path)
    estimator = build_estimator(config, planned(config, TaskId("chief", 0)), tf.distribute.MirroredStrategy(["/cpu:0"]))
    with without_autograph() if off else contextlib.nullcontext():
        estimator.train(train_spec.input_fn, max_steps=2)
    return converted, glob.glob(str(temporary / GENERATED))


def test_a_strategy_s_training_converts_estimator_s_functions_with_autograph_on(tmp_path, monkeypatch):
    """TF 2.15's behaviour the work-around exists for; if this fails, TF no longer converts them. (Each conversion
    writes its file once per process: an earlier test in this process may have written them.)"""
    converted, files = train_under_a_strategy(tmp_path, monkeypatch, off=False)
    assert "_call_model_fn" in converted and len(files) <= len(converted)


def test_a_strategy_s_training_converts_nothing_and_leaves_no_file_without_autograph(tmp_path, monkeypatch):
    converted, files = train_under_a_strategy(tmp_path, monkeypatch, off=True)
    assert converted == [] and files == []


def test_without_autograph_restores_the_status_it_found():
    from tensorflow.python.autograph.core import ag_ctx  # pylint: disable=import-outside-toplevel

    before = ag_ctx.control_status_ctx().status
    with without_autograph():
        assert ag_ctx.control_status_ctx().status == ag_ctx.Status.DISABLED
    assert ag_ctx.control_status_ctx().status == before
