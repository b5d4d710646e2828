"""The trainer side by side with Keras `model.fit` under MultiWorkerMirroredStrategy and PyTorch DDP, same cores.

For each repetition, and for 1 and 2 workers, it runs A B C: this trainer
(`estimator-mnist launch`, chief + workers + evaluator), the Keras reference
(benchmarks/keras_reference.py, one process per worker) and, when
benchmarks/setup_pytorch.sh has made its venv, the PyTorch DDP reference
(benchmarks/ddp_reference.py over gloo) on identical work: the same network
(without dropout, as the references have none), the same batches in the same
order per worker, Adam with the same constant learning rate, steps and thread
settings (--threads for intra- and inter-op). Then, for 2 workers, the trainer
as its defaults configure it (config/local.yaml's batch and precision,
automatic threads) on the same number of steps. It reports, with medians and
min-max over the repetitions:

- steady-state images/s summed over the workers, between local steps
  --warmup and --steps minus --warmup;
- seconds from launch to the first step, to the last step and to the exit
  of the last process;
- the ratio trainer/peer of each figure, per repetition (the runs of a
  repetition are next to each other in time);
- the test accuracy each run reached;

then the input pipeline alone (input_fn with no model, one thread, images/s)
and --default-runs runs of the default config (config/local.yaml), each timed
from its first step to its first evaluation at 99.2% test accuracy.

Everything goes to --json, and the last line is machine-readable:

  RESULT fp32_2w_ratio=... ddp_2w_ratio=... two_over_one=... startup_ratio=... keras_minus_trainer_points=...
         bf16_2w_ratio=... exit_after_last_step=... time_to_992=... final_accuracy=... precision=... cpu=...

(one line), each a median over the repetitions unless said:
fp32_2w_ratio, ddp_2w_ratio: trainer/Keras and trainer/DDP steady images/s, 2 workers, identical float32 work.
two_over_one: the trainer's 2-worker images/s over its 1-worker images/s.
startup_ratio: trainer/Keras seconds from launch to the first step, 2 workers.
keras_minus_trainer_points: Keras's test accuracy minus the trainer's, in points, 2 workers.
bf16_2w_ratio: the trainer with its defaults over the float32 Keras reference.
exit_after_last_step: seconds from the default run's last step to its exit, the worst run.
time_to_992: seconds from the default run's first step to its first evaluation at or above 99.2%.
final_accuracy: the default run's final accuracy, the worst run.
precision: what model.precision: auto trained in; cpu: amx, avx512_bf16, avx512, avx2 or other.

  .venv/bin/python benchmarks/keras_comparison.py [--repeats 3] [--steps 600] [--ddp auto|on|off] [--json FILE]
  .venv/bin/python benchmarks/keras_comparison.py --smoke   # a few steps: checks it runs, measures nothing
  .venv/bin/python benchmarks/keras_comparison.py --workers 2 --repeats 0 --default-runs 3   # time to 99.2% only

It must have the machine to itself: anything else running skews the figures.

oneDNN: the trainer's tasks always compute with oneDNN on x86 (their plan
sets TF_ENABLE_ONEDNN_OPTS=1). TensorFlow 2.15 alone turns it on only on CPUs
with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX, so on an AVX2-only CPU the
Keras reference computes with Eigen's kernels, as Keras users get it;
--keras-onednn on gives it oneDNN as well. The machine line says which.
--isa AVX2 --keras-onednn off gives every system the kernels an AVX2-only
CPU gives it, at this CPU's speed, and the default runs train in float32 as
`auto` does there (docs/performance.md, "oneDNN on every x86 CPU"): an
emulation, not that CPU's figures.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from estimator_mnist.config import load_config
from estimator_mnist.plan.task_plan import plan_task

from common import DEFAULT_CONFIG, REPO, Shape, benchmark_parser
from comparison_figures import Run
from comparison_report import report
from comparison_runs import default_run, run_ddp, run_reference, run_trainer, torch_available
from pipeline_probe import measure as pipeline_images_per_sec


@dataclasses.dataclass(frozen=True)
class Defaults:
    """What config/local.yaml gives a trainer on this machine, for the "trainer_defaults" runs and the default run."""

    data_dir: str
    batch: int
    precision: str
    shape: Shape
    save_checkpoints_steps: int

    @property
    def label(self) -> str:
        return f"defaults ({self.precision}, batch {self.batch}, auto threads)"


def read_defaults(cpu_bfloat16: Optional[bool] = None) -> Defaults:
    """`cpu_bfloat16` False: as on a CPU without bfloat16 (--isa AVX2); None: this CPU's own."""
    config = load_config(str(DEFAULT_CONFIG))
    cluster = config.cluster
    # This is a CPU benchmark: 'auto' resolves as it does for a task that sees no GPU.
    precision = plan_task(config, cluster.chief_task, cpu_bfloat16=cpu_bfloat16).with_precision([]).precision
    return Defaults(data_dir=config.data_dir, batch=config.training.batch_size_per_replica,
                    precision=precision, save_checkpoints_steps=config.training.save_checkpoints_steps,
                    shape=Shape(chief=len(cluster.chief), workers=len(cluster.worker), ps=len(cluster.ps),
                                evaluator=cluster.evaluator is not None))


def parse_args(argv=None):
    parser = benchmark_parser(__doc__, "write every figure here (default: runs/bench/keras_comparison.json)",
                              not_measured=("ddp",))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600, help="steps per run, for every run")
    parser.add_argument("--warmup", type=int, default=50, help="steps left out at each end of the steady window")
    parser.add_argument("--batch", type=int, default=64, help="per-worker batch of the like-for-like runs")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra- and inter-op threads of every task, both systems")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--pipeline-batches", type=int, default=400, help="cached batches the pipeline probe times")
    parser.add_argument("--pipeline-shards", type=int, default=2,
                        help="the probe times worker 0's pipeline of a cluster this big (its first epoch is 60000/N)")
    parser.add_argument("--ddp", choices=("auto", "on", "off"), default="auto",
                        help="also run the PyTorch DDP reference (auto: when benchmarks/setup_pytorch.sh made its venv)")
    parser.add_argument("--keras-onednn", choices=("default", "on", "off"), default="default",
                        help="the Keras reference's oneDNN: TensorFlow's own choice on this CPU (default, what Keras "
                             "users get: off without AVX512_VNNI, AVX512_BF16 or AMX), on as the trainer has it, or "
                             "off (with --isa AVX2: what an AVX2-only CPU gives it)")
    parser.add_argument("--isa", help="ONEDNN_MAX_CPU_ISA for every process, e.g. AVX2 (default: this CPU's own)")
    parser.add_argument("--default-runs", type=int, default=3, help="runs of the default config, for the time to 99.2%%")
    parser.add_argument("--skip-default-run", action="store_true", help="leave out the default config's runs")
    parser.add_argument("--default-max-steps", type=int, help="shorten the default run (smoke tests)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds allowed per run")
    parser.add_argument("--smoke", action="store_true",
                        help="20 steps, 1 repetition, 2 workers, a 20-step default run: checks that it all runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.steps, args.workers, args.pipeline_batches, args.pipeline_shards = 1, 20, "2", 20, 30
        args.default_max_steps, args.default_runs = args.default_max_steps or 20, 1
    if args.ddp == "on" and not torch_available():
        parser.error("--ddp on: no PyTorch venv; run benchmarks/setup_pytorch.sh first")
    args.ddp = args.ddp == "on" or (args.ddp == "auto" and torch_available())
    return args


def _line(prefix: str, run: Run) -> str:
    return (f"{prefix}: {run.images_per_sec:7.0f} img/s  first step {run.seconds_to_first_step:5.1f} s  "
            f"last step {run.seconds_to_last_step:6.1f} s  exit {run.seconds_to_exit:6.1f} s  accuracy {run.accuracy}")


def compare(args, work: Path, defaults: Defaults) -> List[Run]:
    """Every repetition: A B (C) like-for-like for each worker count, then the trainer with its defaults."""
    worker_counts = [int(w) for w in args.workers.split(",")]
    threads = (args.threads, args.threads)
    same = dict(steps=args.steps, learning_rate=args.learning_rate, warmup=args.warmup, timeout=args.timeout)
    reference = functools.partial(run_reference, onednn={"default": None, "on": True, "off": False}[args.keras_onednn])
    systems = [("trainer", run_trainer), ("reference", reference)] + ([("ddp", run_ddp)] if args.ddp else [])
    runs: List[Run] = []
    for repetition in range(1, args.repeats + 1):
        for workers in worker_counts:
            for system, run in systems:
                runs.append(run(work, defaults.data_dir, workers, batch=args.batch, precision="float32",
                                threads=threads, **same))
                print(_line(f"rep {repetition} {system:9s} {workers}w float32 batch {args.batch}", runs[-1]),
                      flush=True)
        if 2 in worker_counts:
            runs.append(run_trainer(work, defaults.data_dir, 2, batch=defaults.batch, precision=defaults.precision,
                                    threads=("auto", "auto"), **same))
            runs[-1].system = "trainer_defaults"
            print(_line(f"rep {repetition} trainer   2w {defaults.label}", runs[-1]), flush=True)
    return runs


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = args.isa  # every run's processes inherit it
    json_path = args.json or REPO / "runs" / "bench" / "keras_comparison.json"
    # oneDNN held below AVX512_CORE_BF16 computes no bfloat16: the defaults then train as `auto` would there.
    emulated_no_bf16 = bool(args.isa) and not any(k in args.isa.upper() for k in ("BF16", "AMX"))
    defaults = read_defaults(False if emulated_no_bf16 else None)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="keras_comparison_") as workdir:
        work = Path(workdir)
        runs = compare(args, work, defaults)
        pipeline = {batch: pipeline_images_per_sec(defaults.data_dir, batch, args.pipeline_shards,
                                                   args.pipeline_batches)
                    for batch in sorted({args.batch, defaults.batch})}
        default_runs = [] if args.skip_default_run else [
            default_run(work, defaults.data_dir, defaults.shape, args.default_max_steps,
                        defaults.save_checkpoints_steps, args.timeout,
                        precision=defaults.precision if emulated_no_bf16 else None) for _ in range(args.default_runs)]
    report(args, json_path, runs, defaults.label, pipeline, default_runs, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
