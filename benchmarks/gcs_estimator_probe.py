"""The TensorFlow side of benchmarks/gcs_estimator_check.py, in a process of its own (TF reads its GCS settings at
the first gs:// use):

    python benchmarks/gcs_estimator_probe.py estimator gs://BUCKET/model   # 5 steps, evaluate, export, resume to 10
    python benchmarks/gcs_estimator_probe.py read gs://BUCKET/OBJECT        # one read, timed (retries under 503s)
    python benchmarks/gcs_estimator_probe.py write gs://BUCKET/OBJECT       # one small write, timed

Each prints RESULT {json}: what happened and how long each phase took (seconds)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' TensorFlow probe lives with them
from tests.process.gcs_tf_probe import outcome as timed  # noqa: E402  (one read or write, its error, seconds)


def _input_fn():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(256, 28 * 28)).astype(np.float32)
    labels = rng.integers(0, 10, size=256).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices(({"x": features}, labels)).repeat().batch(32)


def _model_fn(features, labels, mode):
    logits = tf.compat.v1.layers.dense(features["x"], 10)
    predictions = {"class": tf.argmax(logits, axis=1)}
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions=predictions, export_outputs={
            "serving_default": tf.estimator.export.PredictOutput(predictions)})
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step())
    metrics = {"accuracy": tf.compat.v1.metrics.accuracy(labels, predictions["class"])}
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)


def _serving_input_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 28 * 28], name="x")
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def estimator_round_trip(model_dir: str) -> dict:
    timings, started = {}, time.monotonic()

    def phase(name, step):
        begun = time.monotonic()
        value = step()
        timings[name] = round(time.monotonic() - begun, 2)
        return value

    config = tf.estimator.RunConfig(model_dir=model_dir, save_checkpoints_steps=5, save_summary_steps=1)
    estimator = tf.estimator.Estimator(_model_fn, config=config)
    phase("train_5_steps", lambda: estimator.train(_input_fn, max_steps=5))
    metrics = phase("evaluate", lambda: estimator.evaluate(_input_fn, steps=2))
    export = phase("export_saved_model", lambda: estimator.export_saved_model(f"{model_dir}/export", _serving_input_fn))
    resumed = tf.estimator.Estimator(_model_fn, config=config)
    phase("resume_to_10_steps", lambda: resumed.train(_input_fn, max_steps=10))
    events = phase("read_events", lambda: sum(
        1 for path in tf.io.gfile.glob(f"{model_dir}/events.out.tfevents.*")
        for _ in tf.compat.v1.train.summary_iterator(path)))
    loaded = phase("load_saved_model", lambda: sorted(tf.saved_model.load(export.decode()).signatures))
    timings["total"] = round(time.monotonic() - started, 2)
    return {"evaluated_step": int(metrics["global_step"]), "final_step": int(resumed.get_variable_value("global_step")),
            "export": export.decode(), "signatures": loaded, "event_records": events,
            "checkpoints": tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths[:],
            "timings": timings}


def _write(path: str) -> None:
    with tf.io.gfile.GFile(path, "wb") as file:
        file.write(b"retried write")


def main() -> int:
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "estimator":
        result = estimator_round_trip(path)
    elif mode == "read":
        result = timed(lambda: tf.io.gfile.GFile(path, "rb").read().decode())
    else:
        result = timed(lambda: _write(path))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
