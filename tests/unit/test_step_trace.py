"""training.trace_step: a real Estimator run writes the trace of that one step, and step_timeline.py reads it."""

import json
import sys

import pytest

from tests.helpers import REPO, planned
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.tf_task import runner
from estimator_mnist.tf_task.step_trace import StepTraceHook, trace_path
from estimator_mnist.tf_task.teardown import TeardownWatchdogHook
from tests.unit.fakes import dataset_of, fake_mnist

sys.path.append(str(REPO / "benchmarks"))
from step_timeline import summarise_trace, transfer_bytes  # noqa: E402  (benchmarks/ is not a package)


def test_a_trainer_writes_the_trace_of_its_local_step_n_and_of_no_other(tmp_path):
    images, labels = fake_mnist(64)
    config = config_from_dict({
        "cluster": {"chief": ["localhost:1"]}, "strategy": "one_device",
        "training": {"batch_size_per_replica": 8, "max_steps": 4, "save_checkpoints_steps": 4, "trace_step": 3},
        "run_dir": str(tmp_path / "run"),
    }, "test")
    plan = planned(config, TaskId("chief", 0))
    # Without the teardown watchdog: once the work is saved it would end this very process.
    hooks = [h for h in runner.training_hooks(config, plan) if not isinstance(h, TeardownWatchdogHook)]
    assert sum(isinstance(h, StepTraceHook) for h in hooks) == 1
    train_spec, _ = runner.train_and_eval_specs(config, make_dataset=lambda split: dataset_of(images, labels),
                                                hooks=hooks)
    runner.build_estimator(config, plan).train(train_spec.input_fn, hooks=train_spec.hooks,
                                               max_steps=train_spec.max_steps)

    path = trace_path(config.run_dir, TaskId("chief", 0), 3)
    assert [p.name for p in (tmp_path / "run" / "traces").iterdir()] == ["chief-0-step-3.json"]
    trace = json.loads(open(path, encoding="utf-8").read())
    nodes = {e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert any(n.startswith("gradients/") for n in nodes)  # the whole training step: forward, backward, update
    figures = summarise_trace(trace)
    assert 0 < figures["update_ms"] < figures["compute_ms"] <= figures["step_ms"]
    assert figures["backward_end_ms"] <= figures["step_ms"]
    assert figures["first_transfer_ms"] is None  # one process: nothing all-reduced


def _op(name, node, ts, dur, label=""):
    return {"ph": "X", "cat": "Op", "name": name, "pid": 1, "tid": 0, "ts": ts, "dur": dur,
            "args": {"name": node, "label": label}}


def test_the_timeline_counts_overlapping_ops_once_and_collectives_and_transfers_as_waiting():
    trace = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "CPU:0 Compute"}},
        _op("_MklNativeFusedConv2D", "classic_cnn/conv2d/Relu", 1000, 10000),
        _op("CollectiveReduceV2", "CollectiveReduceV2_1", 1000, 30000),     # waits from the start: not compute
        _op("_MklMatMul", "gradients/dense/MatMul_grad/MatMul", 8000, 5000),  # overlaps the conv by 3 ms
        _op("RecvBuf", "RecvBuf", 5000, 1000, "[4B] [0.0086Mb/s] 1:129:0:0:0:0:0 from /job:chief"),  # the loss
        _op("RecvBuf", "RecvBuf", 15000, 2000, "[104256B] [149.5Mb/s] 1:110:0:0:0:0:0 from /job:chief"),
        _op("RecvBuf", "RecvBuf", 17000, 2000, "[3.1MB] [12.1Gb/s] 1:109:0:0:0:0:0 from /job:chief"),
        _op("ResourceApplyAdam", "Adam/update_0/ResourceApplyAdam", 29000, 2000),
    ]}
    assert summarise_trace(trace) == {"step_ms": 30.0, "compute_ms": 14.0, "wait_ms": 16.0, "update_ms": 2.0,
                                      "backward_end_ms": 12.0, "first_transfer_ms": 14.0, "transfers_end_ms": 18.0}


def test_transfer_sizes_are_read_from_tensorflow_s_labels():
    assert [transfer_bytes(label) for label in ("[4B] [0.0086Mb/s] x", "[104256B] y", "[3.1MB] z", "RecvBuf")] == \
        [4.0, 104256.0, 3.1 * 1024 * 1024, 0.0]


def test_a_trace_without_ops_is_refused_with_its_cause():
    with pytest.raises(SystemExit, match="the trace holds no op"):
        summarise_trace({"traceEvents": []})
