"""The evaluator's kept graph and session over many evaluations: threads and memory stay flat, and each
evaluation costs its pass over the data.

Scores the newest checkpoint of a run's model_dir --evaluations times with the evaluator's own
KeptEvaluation (tf_task/kept_evaluation.py), the test set and, when the run holds out a validation split,
that split too, as the evaluator task does, in the evaluator's spec (logs/*/evaluator-0.spec.json of the run).
It prints the seconds of each evaluation, the process's threads and resident memory after it, then the growth
of both from the first evaluation on, and the same checkpoint scored by a fresh Estimator.evaluate for the
comparison. The last line:

    RESULT evaluations=200 thread_growth=0 rss_growth=0.01 kept_secs=... fresh_secs=... accuracy=...

    .venv/bin/python benchmarks/evaluator_soak.py --run runs/local --evaluations 200
"""

from __future__ import annotations

import glob
import os
import statistics
import time
from pathlib import Path

from common import benchmark_parser
from results import figures_of, record_run

from estimator_mnist.model_files import checkpoints
from estimator_mnist.plan.task_spec import read_spec


def os_threads() -> int:
    """Every thread of this process, TensorFlow's own pools included (threading counts Python's only)."""
    return len(os.listdir("/proc/self/task"))


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = benchmark_parser(__doc__, not_measured=("run",))
    parser.add_argument("--run", required=True, help="the run directory of a finished default run")
    parser.add_argument("--evaluations", type=int, default=200)
    args = parser.parse_args()
    specs = sorted(glob.glob(str(Path(args.run) / "logs" / "*" / "evaluator-0.spec.json")))
    if not specs:
        raise SystemExit(f"{args.run} has no logs/*/evaluator-0.spec.json: give the run directory of a default run")
    spec = read_spec(specs[-1])
    from estimator_mnist.tf_task import runner  # pylint: disable=import-outside-toplevel
    from estimator_mnist.tf_task.kept_evaluation import KeptEvaluation  # pylint: disable=import-outside-toplevel

    config = spec.config
    estimator = runner.build_estimator(config, spec.plan.with_precision([]))
    _, eval_spec = runner.train_and_eval_specs(config)
    path = checkpoints.latest_checkpoint(config.model_dir)
    kept = [KeptEvaluation(estimator, eval_spec.input_fn, name="soak")]
    samples = []
    for number in range(args.evaluations):
        started = time.time()
        result = kept[0].evaluate(path)
        samples.append((time.time() - started, os_threads(), rss_bytes()))
        if number % 20 == 0 or number == args.evaluations - 1:
            print(f"evaluation {number + 1}: {samples[-1][0]:.2f} s, accuracy {result['accuracy']:.4f}, "
                  f"threads {samples[-1][1]}, RSS {samples[-1][2] / 2**20:.0f} MiB", flush=True)
    started = time.time()
    fresh = estimator.evaluate(eval_spec.input_fn, checkpoint_path=path, name="soak_fresh")
    fresh_secs = time.time() - started
    assert abs(fresh["accuracy"] - result["accuracy"]) < 1e-6, (fresh, result)
    first, last = samples[1] if len(samples) > 1 else samples[0], samples[-1]
    line = (f"RESULT evaluations={args.evaluations} thread_growth={last[1] - first[1]} "
            f"rss_growth={round((max(s[2] for s in samples[1:] or samples) - first[2]) / first[2], 3)} "
            f"kept_secs={statistics.median(s[0] for s in samples[1:] or samples):.2f} "
            f"first_kept_secs={samples[0][0]:.2f} fresh_secs={fresh_secs:.2f} accuracy={float(result['accuracy']):.4f}")
    record_run(args, "evaluator_soak", figures_of(line))
    print(line, flush=True)


if __name__ == "__main__":
    main()
