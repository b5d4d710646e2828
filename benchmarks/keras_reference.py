"""One worker of the reference: Keras `model.fit` under MultiWorkerMirroredStrategy.

This is what TensorFlow recommends instead of Estimator, so it is what
benchmarks/keras_comparison.py measures the trainer against. It is given the
same work as the trainer: the same network (estimator_mnist.model.build_network),
the same input pipeline and shards (estimator_mnist.data.input_fn, fed the
strategy's input context exactly as Estimator feeds it), the same per-worker
batch, Adam with the same constant learning rate, the same number of steps and
the same thread settings.

Run by the benchmark, one process per worker:

  python benchmarks/keras_reference.py --workers localhost:P0,localhost:P1 --index 0 \
      --steps 600 --batch 64 --intra 1 --inter 1 --data-dir D --out worker-0.json

It writes the wall-clock time after the first step, every 10th step and the
last step, and (worker 0 only) the test accuracy, to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
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
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    workers = args.workers.split(",")
    # Set before TensorFlow starts: the strategy reads it when it is built.
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                          "task": {"type": "worker", "index": args.index}})
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from estimator_mnist.data import IMAGE_KEY, input_fn  # pylint: disable=import-outside-toplevel
    from estimator_mnist.model import build_network  # pylint: disable=import-outside-toplevel
    # Recorded at the same steps as the trainer's, so the benchmark reads both alike.
    from estimator_mnist.runner import STEP_TIMES_EVERY  # pylint: disable=import-outside-toplevel

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

    times = []

    class StepTimes(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step = batch + 1
            if step == 1 or step % STEP_TIMES_EVERY == 0 or step == args.steps:
                times.append((step, time.time()))

    network.fit(dataset, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[StepTimes()])
    record = {"task": f"worker:{args.index}", "pid": os.getpid(), "step_times": times}
    if args.index == 0:
        test = input_fn(tf.estimator.ModeKeys.EVAL, data_dir=args.data_dir, batch_size_per_replica=args.batch)
        correct = total = 0
        for features, labels in test:
            # Called directly, outside fit: one forward pass here, no collective with the other workers.
            predicted = tf.argmax(network(features[IMAGE_KEY], training=False), axis=1, output_type=tf.int32)
            correct += int(tf.reduce_sum(tf.cast(predicted == labels, tf.int32)))
            total += int(labels.shape[0])
        record["accuracy"] = correct / total
    Path(args.out).write_text(json.dumps(record), encoding="utf-8")
    record_time = time.time()
    print(f"keras-reference worker:{args.index} wrote {args.out} at {record_time:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
