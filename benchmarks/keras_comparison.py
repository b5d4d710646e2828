"""The trainer side by side with Keras `model.fit` under MultiWorkerMirroredStrategy, on the same cores.

For each repetition, and for 1 and 2 workers, it runs A B A B: this trainer
(`estimator-mnist launch`, chief + workers + evaluator) and the Keras reference
(benchmarks/keras_reference.py, one process per worker) on identical work:
the same network (without dropout, as the reference has none), input
pipeline and shards, per-worker batch, Adam with the same constant learning
rate, steps and thread settings (--threads for intra-
and inter-op). Then, for 2 workers, the trainer as its defaults configure it
(config/local.yaml's batch and precision, automatic threads) on the same
number of steps. It reports, with medians and min-max over the repetitions:

- steady-state images/s summed over the workers, between local steps
  --warmup and --steps minus --warmup;
- seconds from launch to the first step, to the last step and to the exit
  of the last process;
- the ratio trainer/reference of each figure, per repetition (the runs of a
  pair are next to each other in time);
- the test accuracy each run reached;

then the input pipeline alone (input_fn with no model, one thread, images/s)
and a run of the default config (config/local.yaml) timed from its first
step to its first evaluation at 99.0% test accuracy and to its final one.

Everything goes to --json, and the last line is machine-readable:

  RESULT fp32_2w_ratio=... bf16_2w_ratio=... exit_over_last_step=... time_to_99=...

fp32_2w_ratio: trainer/reference steady images/s, 2 workers, identical settings.
bf16_2w_ratio: the trainer with its defaults (mixed_bfloat16 where the CPU has
  it) over that same float32 reference.
exit_over_last_step: launch-to-exit over launch-to-last-step, the worst of the
  trainer's 2-worker runs.
time_to_99: seconds from the default run's first step to a 99.0% evaluation.

  .venv/bin/python benchmarks/keras_comparison.py [--repeats 3] [--steps 600] [--json FILE]
  .venv/bin/python benchmarks/keras_comparison.py --smoke   # a few steps: checks it runs, measures nothing

It must have the machine to itself: anything else running skews the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from estimator_mnist.cluster import free_loopback_ports as free_ports  # noqa: E402
from estimator_mnist.config import default_data_dir, load_config  # noqa: E402
from estimator_mnist.cpu import cpu_has_bfloat16  # noqa: E402

DEFAULT_CONFIG = REPO / "config" / "local.yaml"
TRAINER_TEMPLATE = """
cluster:
  chief: ["localhost:{p0}"]{workers}
  evaluator: localhost
strategy: multi_worker_mirrored
model: {{precision: {precision}, lr_schedule: constant, learning_rate: {learning_rate}, dropout: 0.0}}
tasks:
  all: {{intra_op_threads: {intra}, inter_op_threads: {inter}}}
training: {{batch_size_per_replica: {batch}, max_steps: {steps}, save_checkpoints_steps: {steps}}}
evaluation: {{start_delay_secs: 0, throttle_secs: 0}}
run_dir: {run_dir}
data_dir: {data_dir}
"""
PIPELINE_PROBE = r"""
import sys, time
import tensorflow as tf
from estimator_mnist.data import input_fn
data_dir, batch, shards, cached_batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
# Worker 0's pipeline of a cluster with `shards` workers, as Estimator builds it.
context = tf.distribute.InputContext(num_input_pipelines=shards, input_pipeline_id=0, num_replicas_in_sync=shards)
batches = iter(input_fn(tf.estimator.ModeKeys.TRAIN, context, data_dir=data_dir, batch_size_per_replica=batch))
def rate(count):
    started = time.perf_counter()
    for _ in range(count):
        next(batches)
    return count * batch / (time.perf_counter() - started)
# The first epoch reads and decodes the TFDS records and fills the in-memory cache; later ones read the cache.
print(rate(60000 // shards // batch), rate(cached_batches))
"""


@dataclasses.dataclass
class Run:
    system: str  # "trainer" or "reference"
    workers: int
    batch: int
    precision: str
    images_per_sec: float
    seconds_to_first_step: float
    seconds_to_last_step: float
    seconds_to_exit: float
    accuracy: Optional[float]


def _wait_all(processes: List[subprocess.Popen], timeout: float) -> float:
    """Waits for every process; returns when the last one exited. Kills them all on timeout."""
    deadline = time.time() + timeout
    try:
        for process in processes:
            process.wait(timeout=max(0.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        for process in processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        raise SystemExit(f"a run took more than {timeout:.0f} s; see the logs under its run directory")
    return time.time()


def steady_images_per_sec(step_times: List[Dict[int, float]], batch: int, warmup: int, end: int) -> float:
    """Images/s summed over the workers, between local steps `warmup` and `end` of each."""
    total = 0.0
    for times in step_times:
        total += batch * (end - warmup) / (times[end] - times[warmup])
    return total


def _window(steps: int, warmup: int):
    """Recorded steps (1, every 10th, the last) closest to [warmup, steps - warmup]."""
    warmup = max(10, min(warmup, steps // 4) // 10 * 10)
    end = max(warmup + 10, (steps - warmup) // 10 * 10)
    if end > steps:
        raise SystemExit(f"--steps {steps} is too few to measure a steady state; use at least 20")
    return warmup, end


def _launch(config_path: Path, what: str, timeout: float):
    """Runs `estimator-mnist launch` on config_path; (launch time, exit time, run_summary)."""
    launched = time.time()
    process = subprocess.Popen([sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(config_path),
                                "--quiet"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True, text=True)
    exited = _wait_all([process], timeout)
    output = process.stdout.read()
    if process.returncode != 0:
        raise SystemExit(f"{what} failed (exit {process.returncode}) in {config_path.parent}:\n{output[-3000:]}")
    return launched, exited, json.loads((config_path.parent / "run_summary.json").read_text())


def _read_times(paths: List[Path]) -> List[Dict[int, float]]:
    return [{int(step): t for step, t in json.loads(p.read_text())["step_times"]} for p in paths]


def _summarise(system, workers, batch, precision, launched, exited, step_times, warmup, end, accuracy) -> Run:
    return Run(system=system, workers=workers, batch=batch, precision=precision,
               images_per_sec=steady_images_per_sec(step_times, batch, warmup, end),
               seconds_to_first_step=max(t[1] for t in step_times) - launched,
               seconds_to_last_step=max(max(t.values()) for t in step_times) - launched,
               seconds_to_exit=exited - launched, accuracy=accuracy)


def run_trainer(workdir: Path, data_dir: str, workers: int, steps: int, batch: int, precision: str,
                threads, learning_rate: float, warmup: int, timeout: float) -> Run:
    run_dir = Path(tempfile.mkdtemp(prefix=f"trainer_{workers}w_", dir=workdir))
    ports = free_ports(workers)
    config_path = run_dir / "cluster.yaml"
    config_path.write_text(TRAINER_TEMPLATE.format(
        p0=ports[0], precision=precision,
        workers=("\n  worker: [" + ", ".join(f'"localhost:{p}"' for p in ports[1:]) + "]") if workers > 1 else "",
        learning_rate=learning_rate, intra=threads[0], inter=threads[1], batch=batch, steps=steps,
        run_dir=run_dir, data_dir=data_dir))
    launched, exited, summary = _launch(config_path, "the trainer", timeout)
    times = _read_times(sorted((run_dir / "step_times").glob("*.json")))
    return _summarise("trainer", workers, batch, precision, launched, exited, times, *_window(steps, warmup),
                      summary["accuracy"])


def run_reference(workdir: Path, data_dir: str, workers: int, steps: int, batch: int, precision: str,
                  threads, learning_rate: float, warmup: int, timeout: float, attempts: int = 3) -> Run:
    for _ in range(attempts):
        run_dir = Path(tempfile.mkdtemp(prefix=f"reference_{workers}w_", dir=workdir))
        addresses = ",".join(f"localhost:{p}" for p in free_ports(workers))
        launched = time.time()
        processes, logs = [], []
        for index in range(workers):
            logs.append(run_dir / f"worker-{index}.log")
            with open(logs[-1], "wb") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, str(REPO / "benchmarks" / "keras_reference.py"), "--workers", addresses,
                     "--index", str(index), "--steps", str(steps), "--batch", str(batch), "--precision", precision,
                     "--learning-rate", str(learning_rate), "--intra", str(threads[0]), "--inter", str(threads[1]),
                     "--data-dir", data_dir, "--out", str(run_dir / f"worker-{index}.json")],
                    cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1")))
        exited = _wait_all(processes, timeout)
        text = "".join(p.read_text(errors="replace") for p in logs)
        if any(p.returncode != 0 for p in processes):
            if "address already in use" in text.lower():
                continue  # another program took a port between the check and the start
            raise SystemExit(f"the Keras reference failed in {run_dir}:\n{text[-3000:]}")
        results = [run_dir / f"worker-{i}.json" for i in range(workers)]
        accuracy = json.loads(results[0].read_text()).get("accuracy")
        return _summarise("reference", workers, batch, precision, launched, exited, _read_times(results),
                          *_window(steps, warmup), accuracy)
    raise SystemExit(f"no free ports for the Keras reference after {attempts} attempts")


def pipeline_images_per_sec(data_dir: str, batch: int, shards: int, cached_batches: int) -> dict:
    """Images/s of one worker's input_fn alone, on one thread: first epoch (decoding) and cached epochs."""
    probe = subprocess.run([sys.executable, "-c", PIPELINE_PROBE, data_dir, str(batch), str(shards),
                            str(cached_batches)], cwd=REPO, capture_output=True, text=True,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), timeout=900)
    if probe.returncode != 0:
        raise SystemExit(f"the input pipeline probe failed:\n{probe.stderr[-3000:]}")
    first_epoch, cached = map(float, probe.stdout.strip().splitlines()[-1].split())
    return {"first_epoch": first_epoch, "cached": cached}


def default_run(workdir: Path, max_steps: Optional[int], timeout: float) -> dict:
    """config/local.yaml as shipped (on fresh loopback ports), timed from its chief's first step."""
    run_dir = Path(tempfile.mkdtemp(prefix="default_", dir=workdir))
    ports = free_ports(2)
    text = DEFAULT_CONFIG.read_text()
    config = load_config(str(DEFAULT_CONFIG))
    for address, port in zip((*config.cluster.chief, *config.cluster.worker), ports):
        text = text.replace(f"localhost:{address.port}", f"localhost:{port}")
    if max_steps is not None:
        text = text.replace(f"max_steps: {config.training.max_steps}", f"max_steps: {max_steps}")
        text = text.replace(f"save_checkpoints_steps: {config.training.save_checkpoints_steps}",
                            f"save_checkpoints_steps: {min(max_steps, config.training.save_checkpoints_steps)}")
    config_path = run_dir / "local.yaml"
    config_path.write_text(text + f"\nrun_dir: {run_dir}\ndata_dir: {config.data_dir}\n")
    launched, exited, summary = _launch(config_path, "the default run", timeout)
    first_step = _read_times([run_dir / "step_times" / "chief-0.json"])[0][1]
    evaluations = summary["evaluations"]
    reached = [e for e in evaluations if e["accuracy"] >= 0.99]
    final = evaluations[-1]
    return {"max_steps": summary["max_steps"], "final_accuracy": final["accuracy"],
            "seconds_to_first_step": first_step - launched,
            "training_phase_secs": final["time"] - first_step,
            "time_to_99": reached[0]["time"] - first_step if reached else None,
            "step_at_99": reached[0]["global_step"] if reached else None,
            "seconds_to_exit": exited - launched,
            "evaluations": [(e["global_step"], round(e["accuracy"], 4), round(e["time"] - first_step, 1))
                            for e in evaluations]}


def _stats(values: List[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _cell(values: List[float], digits: int) -> str:
    if not values:
        return "-"
    s = _stats(values)
    return (f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})" if len(values) > 1
            else f"{s['median']:.{digits}f}")


FIGURES = (("images_per_sec", "steady images/s (summed)", 0), ("seconds_to_first_step", "launch to first step, s", 1),
           ("seconds_to_last_step", "launch to last step, s", 1), ("seconds_to_exit", "launch to exit, s", 1),
           ("accuracy", "test accuracy", 4))


def table(runs: List[Run], bf16_label: str) -> List[str]:
    lines = ["| workers | figure | trainer | Keras reference | trainer / reference |",
             "| --- | --- | --- | --- | --- |"]
    for workers in sorted({r.workers for r in runs}):
        trainer = [r for r in runs if r.system == "trainer" and r.workers == workers]
        reference = [r for r in runs if r.system == "reference" and r.workers == workers]
        tuned = [r for r in runs if r.system == "trainer_defaults" and r.workers == workers]
        for key, label, digits in FIGURES:
            a = [getattr(r, key) for r in trainer]
            b = [getattr(r, key) for r in reference]
            ratios = [x / y for x, y in zip(a, b) if x is not None and y]
            lines.append(f"| {workers} | {label} | {_cell([v for v in a if v is not None], digits)} | "
                         f"{_cell([v for v in b if v is not None], digits)} | {_cell(ratios, 2)} |")
        for key, label, digits in FIGURES:
            if not tuned:
                break
            a = [getattr(r, key) for r in tuned]
            b = [getattr(r, key) for r in reference]
            ratios = [x / y for x, y in zip(a, b) if x is not None and y]
            lines.append(f"| {workers} | {bf16_label}: {label} | {_cell([v for v in a if v is not None], digits)} | "
                         f"(float32 above) | {_cell(ratios, 2)} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600, help="steps per run, for every run")
    parser.add_argument("--warmup", type=int, default=50, help="steps left out at each end of the steady window")
    parser.add_argument("--batch", type=int, default=64, help="per-worker batch of the like-for-like runs")
    parser.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads of every task, both systems")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--pipeline-batches", type=int, default=400, help="cached batches the pipeline probe times")
    parser.add_argument("--pipeline-shards", type=int, default=2,
                        help="the probe times worker 0's pipeline of a cluster this big (its first epoch is 60000/N)")
    parser.add_argument("--skip-default-run", action="store_true", help="leave out the time to 99%% (saves ~4 min)")
    parser.add_argument("--default-max-steps", type=int, help="shorten the default run (smoke tests)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds allowed per run")
    parser.add_argument("--smoke", action="store_true",
                        help="20 steps, 1 repetition, 2 workers, a 20-step default run: checks that it all runs")
    parser.add_argument("--json", type=Path, help="write every figure here (default: runs/bench/keras_comparison.json)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.steps, args.workers, args.pipeline_batches, args.pipeline_shards = 1, 20, "2", 20, 30
        args.default_max_steps = args.default_max_steps or 20
    json_path = args.json or REPO / "runs" / "bench" / "keras_comparison.json"
    worker_counts = [int(w) for w in args.workers.split(",")]
    threads = (args.threads, args.threads)
    defaults = load_config(str(DEFAULT_CONFIG))
    data_dir = defaults.data_dir or default_data_dir()
    # The trainer "as its defaults configure it": what a task on this machine resolves precision=auto to.
    default_precision = defaults.model.precision
    if default_precision == "auto":
        default_precision = "mixed_bfloat16" if cpu_has_bfloat16() else "float32"
    bf16_label = f"defaults ({default_precision}, batch {defaults.training.batch_size_per_replica}, auto threads)"
    runs: List[Run] = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="keras_comparison_") as workdir:
        work = Path(workdir)
        common = dict(steps=args.steps, learning_rate=args.learning_rate, warmup=args.warmup, timeout=args.timeout)
        for repetition in range(args.repeats):
            for workers in worker_counts:
                for system, run in (("trainer", run_trainer), ("reference", run_reference)):
                    result = run(work, data_dir, workers, batch=args.batch, precision="float32", threads=threads,
                                 **common)
                    runs.append(result)
                    print(f"rep {repetition + 1} {system:9s} {workers}w float32 batch {args.batch}: "
                          f"{result.images_per_sec:7.0f} img/s  first step {result.seconds_to_first_step:5.1f} s  "
                          f"last step {result.seconds_to_last_step:6.1f} s  exit {result.seconds_to_exit:6.1f} s  "
                          f"accuracy {result.accuracy}", flush=True)
            if 2 in worker_counts:
                result = run_trainer(work, data_dir, 2, batch=defaults.training.batch_size_per_replica,
                                     precision=default_precision, threads=("auto", "auto"), **common)
                result.system = "trainer_defaults"
                runs.append(result)
                print(f"rep {repetition + 1} trainer   2w {bf16_label}: {result.images_per_sec:7.0f} img/s  "
                      f"first step {result.seconds_to_first_step:5.1f} s  last step {result.seconds_to_last_step:6.1f} s"
                      f"  exit {result.seconds_to_exit:6.1f} s  accuracy {result.accuracy}", flush=True)
        pipeline = {batch: pipeline_images_per_sec(data_dir, batch, args.pipeline_shards, args.pipeline_batches)
                    for batch in sorted({args.batch, defaults.training.batch_size_per_replica})}
        default = None if args.skip_default_run else default_run(work, args.default_max_steps, args.timeout)

    def paired(system_a, system_b, workers):
        a = [r.images_per_sec for r in runs if r.system == system_a and r.workers == workers]
        b = [r.images_per_sec for r in runs if r.system == system_b and r.workers == workers]
        return [x / y for x, y in zip(a, b)]

    fp32_ratio = paired("trainer", "reference", 2)
    bf16_ratio = paired("trainer_defaults", "reference", 2)
    exit_ratios = [r.seconds_to_exit / r.seconds_to_last_step for r in runs
                   if r.system.startswith("trainer") and r.workers == 2]
    machine = (f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
               f"Python {platform.python_version()}")
    lines = table(runs, bf16_label)
    print(f"\n{time.strftime('%Y-%m-%d')}, {machine}; {args.repeats} repetition(s) of {args.steps} steps, "
          f"steady window {_window(args.steps, args.warmup)}, {args.threads} intra/inter-op thread(s) per task "
          f"in the like-for-like runs; median (min-max)\n")
    print("\n".join(lines))
    print(f"\ninput pipeline alone (input_fn, no model, one thread, one of {args.pipeline_shards} shards), images/s: "
          + "; ".join(f"batch {b}: first epoch {v['first_epoch']:.0f}, cached {v['cached']:.0f}"
                      for b, v in pipeline.items()))
    if default:
        print(f"default config ({DEFAULT_CONFIG.relative_to(REPO)}, max_steps {default['max_steps']}): "
              f"first step {default['seconds_to_first_step']:.1f} s after launch; "
              f"99.0% after {default['time_to_99'] if default['time_to_99'] is None else round(default['time_to_99'], 1)} s "
              f"(step {default['step_at_99']}); final accuracy {default['final_accuracy']:.4f} "
              f"{default['training_phase_secs']:.1f} s after the first step; exit {default['seconds_to_exit']:.1f} s "
              f"after launch; evaluations (step, accuracy, s) {default['evaluations']}")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine, "args": {k: str(v) for k, v in vars(args).items()},
        "runs": [dataclasses.asdict(r) for r in runs], "table": lines,
        "input_pipeline": pipeline, "default_run": default,
        "fp32_2w_ratios": fp32_ratio, "bf16_2w_ratios": bf16_ratio, "exit_over_last_step": exit_ratios,
        "seconds": time.time() - started}, indent=2) + "\n")
    print(f"figures: {json_path}")

    def fmt(values, reduce=statistics.median):
        return f"{reduce(values):.3f}" if values else "none"

    time_to_99 = "none" if not default or default["time_to_99"] is None else f"{default['time_to_99']:.1f}"
    print(f"RESULT fp32_2w_ratio={fmt(fp32_ratio)} bf16_2w_ratio={fmt(bf16_ratio)} "
          f"exit_over_last_step={fmt(exit_ratios, max)} time_to_99={time_to_99}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
