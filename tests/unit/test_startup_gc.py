"""The TensorFlow child pauses Python's garbage collector through its imports and set-up, then freezes what
they made (tf_task/__main__.run, runner.run_task): six full collections took over a second of its start-up."""

import gc
import sys
import types

import pytest

from estimator_mnist.plan.task_spec import TaskSpec
from estimator_mnist.tf_task import __main__ as entry
from estimator_mnist.tf_task import runner
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.plan.task_plan import plan_task


@pytest.fixture
def collector_restored():
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was_enabled else gc.disable)()


def test_the_child_imports_the_runner_and_runs_its_task_with_the_collector_paused(monkeypatch, collector_restored):
    seen = {}
    fake_runner = types.ModuleType("estimator_mnist.tf_task.runner")

    def run_task(spec, priority, ready_fd):
        seen["running"] = gc.isenabled()
        return 0

    fake_runner.run_task = run_task
    monkeypatch.setitem(sys.modules, "estimator_mnist.tf_task.runner", fake_runner)
    monkeypatch.setattr(entry, "priority_now", lambda: "unchanged")
    monkeypatch.setattr(entry, "set_tf_config", lambda spec: None)
    gc.enable()
    assert entry.run(types.SimpleNamespace(plan=None), 5) == 0
    assert seen == {"running": False}


def test_run_task_turns_the_collector_back_on_with_its_set_up_frozen(monkeypatch, tmp_path, collector_restored):
    config = config_from_dict({"cluster": {"chief": ["localhost:1"], "evaluator": "localhost"},
                               "model_dir": str(tmp_path / "model")}, "test")
    seen = {}

    class NoPreemption:
        def __init__(self, *args, **kwargs):
            pass

        def install(self):
            pass

    monkeypatch.setattr(runner, "Preemption", NoPreemption)
    monkeypatch.setattr(runner, "bound_session_recreation", lambda secs: None)
    # The thread pools can be sized only before this test process's TensorFlow made its devices.
    monkeypatch.setattr(runner, "configure_devices", lambda plan: None)
    monkeypatch.setattr(runner, "build_estimator", lambda *args: None)
    monkeypatch.setattr(runner, "train_and_eval_specs", lambda *args, **kwargs: (None, None))
    monkeypatch.setattr(runner, "run_evaluator", lambda *args: seen.update(enabled=gc.isenabled(),
                                                                            frozen=gc.get_freeze_count()))
    gc.unfreeze()
    gc.disable()
    assert runner.run_task(TaskSpec(config, plan_task(config, TaskId("evaluator", 0)))) == 0
    assert seen["enabled"] and seen["frozen"] > 0
