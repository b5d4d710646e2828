"""The evaluator: every evaluation recorded, and the final checkpoint scored at once."""

import os
import threading
import time

import numpy as np
import tensorflow as tf

from estimator_mnist import runner
from estimator_mnist.checkpoints import read_eval_results
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.evaluator import RecordingExporter, evaluate_checkpoints
from estimator_mnist.task_plan import plan_task
from tests.unit.fakes import dataset_of, fake_mnist


def test_recording_exporter_appends_each_evaluation(tmp_path):
    class FakeExporter(tf.estimator.Exporter):
        name = "fake"

        def export(self, *args):
            return b"/exports/123"

    recorder = RecordingExporter(FakeExporter(), str(tmp_path / "eval_results.jsonl"))
    for step in (10, 20):
        result = {"global_step": np.int64(step), "accuracy": np.float32(0.5), "loss": np.float32(1.0)}
        assert recorder.export(None, "x", f"ckpt-{step}", result, step == 20) == "/exports/123"
    records = read_eval_results(str(tmp_path))
    assert [r["global_step"] for r in records] == [10, 20]
    assert records[-1]["final"] is True and records[-1]["export"] == "/exports/123"


def test_evaluator_scores_new_checkpoints_and_the_final_one_without_waiting_out_the_throttle(tmp_path):
    images, labels = fake_mnist(64)
    config = config_from_dict({
        "cluster": {"chief": ["localhost:1"], "evaluator": "localhost"},
        "training": {"batch_size_per_replica": 8, "max_steps": 4, "save_checkpoints_steps": 2},
        "evaluation": {"batch_size": 32, "throttle_secs": 3600, "start_delay_secs": 0},
        "model_dir": str(tmp_path / "model"),
    }, "test")
    estimator = runner.build_estimator(config, plan_task(config, TaskId("chief", 0)))
    train_spec, eval_spec = runner.train_and_eval_specs(config, make_dataset=lambda split: dataset_of(images, labels))
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
    evaluator.join()
