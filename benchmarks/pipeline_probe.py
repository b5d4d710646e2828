"""The input pipeline alone: images/s of one worker's input_fn with no model, on one thread.

`measure` runs this file as a script, in a process of its own so that its
TensorFlow runtime and thread settings touch nothing else:

  python benchmarks/pipeline_probe.py --data-dir D --batch 64 --shards 2 --cached-batches 400

It prints two numbers: the images/s of the first epoch (reading and decoding
the TFDS records, filling the in-memory cache) and of cached epochs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

MNIST_TRAIN_IMAGES = 60000


def measure(data_dir: str, batch: int, shards: int, cached_batches: int) -> dict:
    """{"first_epoch": images/s, "cached": images/s} of worker 0's pipeline in a cluster of `shards` workers."""
    probe = subprocess.run([sys.executable, __file__, "--data-dir", data_dir, "--batch", str(batch),
                            "--shards", str(shards), "--cached-batches", str(cached_batches)],
                           capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                           timeout=900)
    if probe.returncode != 0:
        raise SystemExit(f"the input pipeline probe failed:\n{probe.stderr[-3000:]}")
    first_epoch, cached = map(float, probe.stdout.strip().splitlines()[-1].split())
    return {"first_epoch": first_epoch, "cached": cached}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--shards", type=int, required=True, help="workers of the cluster whose worker 0 is timed")
    parser.add_argument("--cached-batches", type=int, required=True)
    args = parser.parse_args(argv)

    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from estimator_mnist.tf_task.data import input_fn  # pylint: disable=import-outside-toplevel

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    # Worker 0's pipeline of a cluster with `shards` workers, as Estimator builds it.
    context = tf.distribute.InputContext(num_input_pipelines=args.shards, input_pipeline_id=0,
                                         num_replicas_in_sync=args.shards)
    batches = iter(input_fn(tf.estimator.ModeKeys.TRAIN, context, data_dir=args.data_dir,
                            batch_size_per_replica=args.batch))

    def rate(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            next(batches)
        return count * args.batch / (time.perf_counter() - started)

    # The first epoch reads and decodes the TFDS records and fills the in-memory cache; later ones read the cache.
    print(rate(MNIST_TRAIN_IMAGES // args.shards // args.batch), rate(args.cached_batches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
