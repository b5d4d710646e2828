"""How many steps a schedule needs to reach 99.2%: one process, float32, the test set scored every few steps.

The default run's time to 99.2% is (steps to 99.2%) x (seconds per step) +
the evaluation's delay. Steps to accuracy depend on the global batch, the
schedule and the epochs seen, not on the CPU, so they can be measured on any
machine, in float32 (what CPUs without bfloat16 train in), and much faster
than by the cluster: one process trains the classic CNN on the global batch
with Keras's training loop and scores the whole 10k test set every --every
steps. The learning rate is the trainer's own model.lr_schedule:
warmup_cosine (estimator_mnist.tf_task.model computes it: a tenth of the peak rising
to it over --warmup steps, then cosine to 0 at --steps). The targets are
smoothed as model.label_smoothing does, and the score is that of the moving
average of the weights the evaluator restores (model.weight_average_decay);
Adam's betas, dropout and the network's input normalisation are the model's
keys of those names. Every default is the trainer's (config/schema.py), so a
flag given is a change probed against the defaults. Seconds per step are the
benchmark's business (keras_comparison.py); this one prints steps only:

  .venv/bin/python benchmarks/schedule_probe.py --seed 1 --steps 300 --start 120 --every 10  # the defaults
  RESULT first_992=120 final=... evaluations=[[120, 0.9923], [130, 0.9927], [140, 0.9933], ...]

The default run trains 2 workers x 256 = a global batch of 512. --threads 1
lets several seeds run side by side, one core's share each.
"""

from __future__ import annotations

import contextlib
import json
import sys

from common import benchmark_parser
from results import record_run
from estimator_mnist.config import default_data_dir
from estimator_mnist.config.schema import ModelConfig, TrainingConfig


def parse_args(argv=None):
    parser = benchmark_parser(__doc__, not_measured=("data_dir",))
    parser.add_argument("--batch", type=int, default=512, help="global batch (workers x batch_size_per_replica)")
    parser.add_argument("--steps", type=int, default=TrainingConfig().max_steps)
    parser.add_argument("--stop", type=int, default=0,
                        help="stop after this step (0: --steps); the schedule still ends at --steps: a quick look at "
                             "the early steps")
    parser.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32",
                        help="the trainer's compute type (mixed_bfloat16: what model.precision auto picks on CPUs "
                             "with AMX or AVX512_BF16)")
    parser.add_argument("--lr", type=float, default=ModelConfig().learning_rate, help="peak learning rate (Adam)")
    parser.add_argument("--warmup", type=int, default=ModelConfig().warmup_steps)
    parser.add_argument("--beta1", type=float, default=ModelConfig().adam_beta1, help="Adam's beta1")
    parser.add_argument("--beta2", type=float, default=ModelConfig().adam_beta2, help="Adam's beta2")
    parser.add_argument("--normalise-inputs", choices=("on", "off"),
                        default="on" if ModelConfig().normalise_inputs else "off", help="model.normalise_inputs")
    parser.add_argument("--dropout", type=float, default=ModelConfig().dropout)
    parser.add_argument("--label-smoothing", type=float, default=ModelConfig().label_smoothing)
    parser.add_argument("--weight-average-decay", type=float, default=ModelConfig().weight_average_decay,
                        help="score a moving average of the weights, as the evaluator does; 0: the weights")
    parser.add_argument("--weight-average-warmup", type=int, default=ModelConfig().weight_average_warmup,
                        help="model.weight_average_warmup: the average's decay is min(decay, (n - 1) / (n + this))")
    parser.add_argument("--every", type=int, default=25, help="score the test set every N steps")
    parser.add_argument("--start", type=int, default=100, help="from this step on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: TensorFlow's choice)")
    parser.add_argument("--data-dir", default=default_data_dir())
    return parser.parse_args(argv)


class WeightAverage:
    """weight_average.py's moving average, kept beside a Keras network's weights and swapped in to be scored."""

    def __init__(self, tf, weights, decay: float, warmup: int):
        from estimator_mnist.tf_task.weight_average import warmed_up_decay  # pylint: disable=import-outside-toplevel

        self._warmed_up_decay, self._weights, self.decay, self._warmup = warmed_up_decay, weights, decay, warmup
        self._averages = [tf.Variable(w, trainable=False) for w in weights]
        self._kept = [tf.Variable(w, trainable=False) for w in weights]

    def update(self, step):
        kept = self._warmed_up_decay(self.decay, step, self._warmup)  # the trainer's own warm-up
        for average, weight in zip(self._averages, self._weights):
            average.assign_sub((1.0 - kept) * (average - weight))

    @contextlib.contextmanager
    def in_place(self):
        """The average in the weights' place, as the evaluator restores it; nothing to swap with decay 0."""
        swap = bool(self.decay)
        for keep, weight, average in zip(self._kept, self._weights, self._averages) if swap else ():
            keep.assign(weight)
            weight.assign(average)
        try:
            yield
        finally:
            for keep, weight in zip(self._kept, self._weights) if swap else ():
                weight.assign(keep)


def main(argv=None) -> int:
    args = parse_args(argv)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from estimator_mnist.tf_task.data import IMAGE_KEY, input_fn  # pylint: disable=import-outside-toplevel
    from estimator_mnist.tf_task.model import (  # pylint: disable=import-outside-toplevel
        NUM_CLASSES, _learning_rate, build_network)

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.random.set_seed(args.seed)
    train = iter(input_fn(tf.estimator.ModeKeys.TRAIN, None, data_dir=args.data_dir, batch_size_per_replica=args.batch,
                          seed=args.seed))
    test = list(input_fn(tf.estimator.ModeKeys.EVAL, None, data_dir=args.data_dir, batch_size_per_replica=1,
                         eval_batch_size=2000))
    network = build_network("classic_cnn", args.precision, args.dropout, args.normalise_inputs == "on")
    network.build((None, 28, 28, 1))
    weights = network.trainable_variables
    average = WeightAverage(tf, weights, args.weight_average_decay, args.weight_average_warmup)
    schedule = ModelConfig(learning_rate=args.lr, lr_schedule="warmup_cosine", warmup_steps=args.warmup)

    class WarmupCosine(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return _learning_rate(schedule, step, args.steps)

    # tf.compat.v1's AdamOptimizer, which the trainer uses, has epsilon 1e-8.
    optimizer = tf.keras.optimizers.Adam(learning_rate=WarmupCosine(), beta_1=args.beta1, beta_2=args.beta2,
                                         epsilon=1e-8)
    # Keras's label_smoothing is the trainer's: (1 - s) one-hot + s / 10 on every class.
    loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=args.label_smoothing)

    @tf.function
    def train_step(images, labels, step):
        with tf.GradientTape() as tape:
            loss = loss_fn(tf.one_hot(labels, NUM_CLASSES), network(images, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
        average.update(step)

    @tf.function
    def predict(images):
        return tf.argmax(network(images, training=False), 1, output_type=tf.int32)

    def accuracy() -> float:
        with average.in_place():
            right = sum(int(tf.reduce_sum(tf.cast(predict(f[IMAGE_KEY]) == labels, tf.int32))) for f, labels in test)
        return round(right / sum(len(labels) for _, labels in test), 4)

    evaluations = []
    last = min(args.stop or args.steps, args.steps)
    for step in range(1, last + 1):
        features, labels = next(train)
        train_step(features[IMAGE_KEY], labels, tf.constant(step))  # a tensor: a Python int would retrace every step
        if (step >= args.start and step % args.every == 0) or step == last:
            evaluations.append([step, accuracy()])
            print(f"step {step}: {evaluations[-1][1]:.4f}", flush=True)
    first = next((step for step, value in evaluations if value >= 0.992), None)
    record_run(args, "schedule_probe", {"first_992": first, "final": evaluations[-1][1], "evaluations": evaluations})
    print(f"RESULT first_992={first} final={evaluations[-1][1]:.4f} evaluations={json.dumps(evaluations)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
