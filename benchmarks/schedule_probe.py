"""How many steps a schedule needs to reach 99.2%: one process, float32, the test set scored every few steps.

The default run's time to 99.2% is (steps to 99.2%) x (seconds per step) +
the evaluation's delay. Steps to accuracy depend on the global batch, the
schedule and the epochs seen, not on the CPU, so they can be measured on any
machine, in float32 (what CPUs without bfloat16 train in), and much faster
than by the cluster: one process trains the classic CNN on the global batch
with Keras's training loop and scores the whole 10k test set every --every
steps. The learning rate is the trainer's own model.lr_schedule:
warmup_cosine (estimator_mnist.model computes it: a tenth of the peak rising
to it over --warmup steps, then cosine to 0 at --steps). Seconds per
step are the benchmark's business (keras_comparison.py); this one prints
steps only:

  .venv/bin/python benchmarks/schedule_probe.py --batch 512 --steps 400 --lr 0.003 --warmup 40
  RESULT first_992=250 final=0.9924 evaluations=[[100, 0.9801], ...]

The default run trains 2 workers x 256 = a global batch of 512.
"""

from __future__ import annotations

import json
import sys

from common import benchmark_parser
from estimator_mnist.config import default_data_dir


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--batch", type=int, default=512, help="global batch (workers x batch_size_per_replica)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--lr", type=float, default=0.003, help="peak learning rate (Adam)")
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--dropout", type=float, default=0.4)
    parser.add_argument("--every", type=int, default=25, help="score the test set every N steps")
    parser.add_argument("--start", type=int, default=100, help="from this step on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=default_data_dir())
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from estimator_mnist.data import IMAGE_KEY, input_fn  # pylint: disable=import-outside-toplevel
    from estimator_mnist.config.schema import ModelConfig  # pylint: disable=import-outside-toplevel
    from estimator_mnist.model import _learning_rate, build_network  # pylint: disable=import-outside-toplevel

    tf.random.set_seed(args.seed)
    train = iter(input_fn(tf.estimator.ModeKeys.TRAIN, None, data_dir=args.data_dir, batch_size_per_replica=args.batch,
                          seed=args.seed))
    test = list(input_fn(tf.estimator.ModeKeys.EVAL, None, data_dir=args.data_dir, batch_size_per_replica=1,
                         eval_batch_size=2000))
    network = build_network("classic_cnn", "float32", args.dropout)

    schedule = ModelConfig(learning_rate=args.lr, lr_schedule="warmup_cosine", warmup_steps=args.warmup)

    class WarmupCosine(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return _learning_rate(schedule, step, args.steps)

    # tf.compat.v1's AdamOptimizer, which the trainer uses, has epsilon 1e-8.
    optimizer = tf.keras.optimizers.Adam(learning_rate=WarmupCosine(), epsilon=1e-8)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, network(images, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, network.trainable_variables), network.trainable_variables))

    @tf.function
    def predict(images):
        return tf.argmax(network(images, training=False), 1, output_type=tf.int32)

    def accuracy() -> float:
        right = sum(int(tf.reduce_sum(tf.cast(predict(f[IMAGE_KEY]) == labels, tf.int32))) for f, labels in test)
        return round(right / sum(len(labels) for _, labels in test), 4)

    evaluations = []
    for step in range(1, args.steps + 1):
        features, labels = next(train)
        train_step(features[IMAGE_KEY], labels)
        if (step >= args.start and step % args.every == 0) or step == args.steps:
            evaluations.append([step, accuracy()])
            print(f"step {step}: {evaluations[-1][1]:.4f}", flush=True)
    first = next((step for step, value in evaluations if value >= 0.992), None)
    print(f"RESULT first_992={first} final={evaluations[-1][1]:.4f} evaluations={json.dumps(evaluations)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
