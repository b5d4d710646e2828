"""One worker of the reference: Keras `model.fit` under MultiWorkerMirroredStrategy.

This is what TensorFlow recommends instead of Estimator, so it is what
benchmarks/keras_comparison.py measures the trainer against. It is given the
same work as the trainer: the same network (estimator_mnist.tf_model.network.build_network),
the same input pipeline and shards (estimator_mnist.tf_task.data.input_fn, fed the
strategy's input context exactly as Estimator feeds it), the same per-worker
batch, Adam with the same constant learning rate, the same number of steps and
the same thread settings.

Run by the benchmark, one process per worker:

  python benchmarks/keras_reference.py --workers localhost:P0,localhost:P1 --index 0 \
      --steps 600 --batch 64 --intra 1 --inter 1 --data-dir D --run-dir R --accuracy-out R/accuracy.json

It writes the trainer's progress record (estimator_mnist.model_files.progress) to
R/progress/worker-<index>.json, so the benchmark reads both systems' step
times alike, and (worker 0 only) the test accuracy to --accuracy-out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from estimator_mnist.config import TaskId
from estimator_mnist.model_files.progress import ProgressWriter, progress_path


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", required=True, help="comma-separated host:port of every worker")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True, help="per worker")
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--intra", type=int, required=True)
    parser.add_argument("--inter", type=int, required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--run-dir", required=True, help="the progress record goes to RUN_DIR/progress/")
    parser.add_argument("--accuracy-out", help="worker 0 writes the test accuracy here")
    return parser.parse_args(argv)


def train(args, tf, writer: ProgressWriter):
    """The network after `args.steps` steps of fit, each recorded by `writer`."""
    from estimator_mnist.tf_task.data import IMAGE_KEY, input_fn  # pylint: disable=import-outside-toplevel
    from estimator_mnist.tf_model.network import build_network  # pylint: disable=import-outside-toplevel

    tf.config.threading.set_intra_op_parallelism_threads(args.intra)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def dataset_fn(input_context):
        dataset = input_fn(tf.estimator.ModeKeys.TRAIN, input_context, data_dir=args.data_dir,
                           batch_size_per_replica=args.batch)
        return dataset.map(lambda features, labels: (features[IMAGE_KEY], labels))

    # input_fn shards by the context itself, as it does under Estimator.
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        network = build_network("classic_cnn", args.precision)
        network.compile(optimizer=tf.keras.optimizers.Adam(args.learning_rate),
                        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Progress(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            loss = (logs or {}).get("loss")
            # Synchronous all-reduce: every worker's local step is also the global step.
            writer.step(batch + 1, None if loss is None else float(loss))

    network.fit(dataset, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[Progress()])
    writer.finish(args.steps)
    return network


def evaluate_accuracy(network, tf, data_dir: str, batch: int) -> float:
    from estimator_mnist.tf_task.data import IMAGE_KEY, input_fn  # pylint: disable=import-outside-toplevel

    correct = total = 0
    for features, labels in input_fn(tf.estimator.ModeKeys.EVAL, data_dir=data_dir, batch_size_per_replica=batch):
        # Called directly, outside fit: one forward pass here, no collective with the other workers.
        predicted = tf.argmax(network(features[IMAGE_KEY], training=False), axis=1, output_type=tf.int32)
        correct += int(tf.reduce_sum(tf.cast(predicted == labels, tf.int32)))
        total += int(labels.shape[0])
    return correct / total


def main(argv=None) -> int:
    args = parse_args(argv)
    task = TaskId("worker", args.index)
    # Set before TensorFlow starts: the strategy reads it when it is built.
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": args.workers.split(",")},
                                          "task": {"type": task.type, "index": task.index}})
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    writer = ProgressWriter(progress_path(args.run_dir, task), str(task), examples_per_step=args.batch)
    network = train(args, tf, writer)
    if args.index == 0 and args.accuracy_out:
        accuracy = evaluate_accuracy(network, tf, args.data_dir, args.batch)
        Path(args.accuracy_out).write_text(json.dumps({"accuracy": accuracy}), encoding="utf-8")
    print(f"keras-reference {task} finished at {time.time():.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
