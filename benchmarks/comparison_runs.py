"""The Keras comparison's runs: the trainer, the Keras reference and the default config, each once, timed.

The trainer runs through `estimator-mnist launch` on config/local.yaml with
`--set` for what the comparison fixes (ports, precision, learning rate,
batch, steps, threads), so everything else is what a user of that file gets.
The reference runs benchmarks/keras_reference.py, one process per worker.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from estimator_mnist.hosts import free_loopback_ports
from estimator_mnist.progress import read_progress

from common import DEFAULT_CONFIG, REPO, Shape, run_launch, start, wait_all
from comparison_figures import Run, summarise, window

KERAS_REFERENCE = REPO / "benchmarks" / "keras_reference.py"
DDP_REFERENCE = REPO / "benchmarks" / "ddp_reference.py"
TORCH_PYTHON = Path(os.environ.get("ESTIMATOR_MNIST_TORCH_VENV", REPO / ".venv-torch"), "bin", "python")


def run_trainer(workdir: Path, data_dir: str, workers: int, steps: int, batch: int, precision: str,
                threads: Sequence, learning_rate: float, warmup: int, timeout: float) -> Run:
    """chief + workers - 1 + evaluator under multi_worker_mirrored, on the reference's work (no dropout)."""
    overrides = ["strategy.name=multi_worker_mirrored", f"model.precision={precision}", "model.lr_schedule=constant",
                 f"model.learning_rate={learning_rate}", "model.dropout=0.0",
                 f"tasks.all.intra_op_threads={threads[0]}", f"tasks.all.inter_op_threads={threads[1]}",
                 f"training.batch_size_per_replica={batch}", f"training.max_steps={steps}",
                 f"training.save_checkpoints_steps={steps}",
                 # Score the final checkpoint at once: the time to exit includes that evaluation.
                 "evaluation.start_delay_secs=0", "evaluation.throttle_secs=0",
                 # A failure must show, not be hidden by a restart that doubles the times.
                 "restart.policy=never"]
    run = run_launch(workdir, f"trainer_{workers}w_", DEFAULT_CONFIG, overrides,
                     Shape(chief=1, workers=workers - 1, evaluator=True), data_dir, timeout).check("the trainer")
    return summarise("trainer", workers, batch, precision, run.launched, run.exited, run.run_dir,
                     window(steps, warmup), run.summary()["accuracy"])


def run_reference(workdir: Path, data_dir: str, workers: int, steps: int, batch: int, precision: str,
                  threads: Sequence, learning_rate: float, warmup: int, timeout: float, attempts: int = 3) -> Run:
    """One keras_reference.py process per worker, on fresh loopback ports."""
    for _ in range(attempts):
        run_dir = Path(tempfile.mkdtemp(prefix=f"reference_{workers}w_", dir=workdir))
        addresses = ",".join(f"localhost:{p}" for p in free_loopback_ports(workers))
        accuracy_path = run_dir / "accuracy.json"
        launched = time.time()
        processes, logs = [], [run_dir / f"worker-{index}.log" for index in range(workers)]
        for index, log in enumerate(logs):
            processes.append(start(
                [sys.executable, str(KERAS_REFERENCE), "--workers", addresses, "--index", str(index),
                 "--steps", str(steps), "--batch", str(batch), "--precision", precision,
                 "--learning-rate", str(learning_rate), "--intra", str(threads[0]), "--inter", str(threads[1]),
                 "--data-dir", data_dir, "--run-dir", str(run_dir), "--accuracy-out", str(accuracy_path)],
                log, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1")))
        exited = wait_all(processes, timeout)
        text = "".join(p.read_text(errors="replace") for p in logs)
        if any(p.returncode != 0 for p in processes):
            if "address already in use" in text.lower():
                continue  # another program took a port between the check and the start
            raise SystemExit(f"the Keras reference failed in {run_dir}:\n{text[-3000:]}")
        accuracy = json.loads(accuracy_path.read_text()).get("accuracy")
        return summarise("reference", workers, batch, precision, launched, exited, run_dir, window(steps, warmup),
                         accuracy)
    raise SystemExit(f"no free ports for the Keras reference after {attempts} attempts")


def torch_available() -> bool:
    """Whether benchmarks/setup_pytorch.sh made the PyTorch venv the DDP reference runs in."""
    return TORCH_PYTHON.is_file()


def run_ddp(workdir: Path, data_dir: str, workers: int, steps: int, batch: int, precision: str,
            threads: Sequence, learning_rate: float, warmup: int, timeout: float, attempts: int = 3) -> Run:
    """One ddp_reference.py process per worker in the PyTorch venv, on input_fn's batches saved by ddp_data."""
    from ddp_data import shards, test_set  # pylint: disable=import-outside-toplevel

    if precision != "float32":
        raise SystemExit("the DDP reference trains in float32 only")
    data_dir_out = workdir / "ddp_data"
    data_dir_out.mkdir(exist_ok=True)
    data, test = shards(data_dir, workers, steps, batch, data_dir_out), test_set(data_dir, data_dir_out)
    for _ in range(attempts):
        run_dir = Path(tempfile.mkdtemp(prefix=f"ddp_{workers}w_", dir=workdir))
        port = free_loopback_ports(1)[0]
        accuracy_path = run_dir / "accuracy.json"
        logs = [run_dir / f"worker-{index}.log" for index in range(workers)]
        launched = time.time()
        processes = [start([str(TORCH_PYTHON), str(DDP_REFERENCE), "--workers", str(workers), "--index", str(index),
                            "--port", str(port), "--data", str(data[index]), "--test", str(test),
                            "--steps", str(steps), "--batch", str(batch), "--learning-rate", str(learning_rate),
                            "--intra", str(threads[0]), "--inter", str(threads[1]), "--run-dir", str(run_dir),
                            "--accuracy-out", str(accuracy_path)], log)
                     for index, log in enumerate(logs)]
        exited = wait_all(processes, timeout)
        text = "".join(p.read_text(errors="replace") for p in logs)
        if any(p.returncode != 0 for p in processes):
            if "address already in use" in text.lower():
                continue
            raise SystemExit(f"the DDP reference failed in {run_dir}:\n{text[-3000:]}")
        accuracy = json.loads(accuracy_path.read_text()).get("accuracy")
        return summarise("ddp", workers, batch, precision, launched, exited, run_dir, window(steps, warmup), accuracy)
    raise SystemExit(f"no free port for the DDP reference after {attempts} attempts")


def default_run(workdir: Path, data_dir: str, shape: Shape, max_steps: Optional[int], save_steps: int,
                timeout: float) -> dict:
    """config/local.yaml as shipped (on fresh loopback ports), timed from its chief's first step.

    `max_steps` shortens it (smoke runs); a checkpoint is then saved by the
    last step at the latest, so that there is something to evaluate.
    """
    overrides = [] if max_steps is None else [f"training.max_steps={max_steps}",
                                              f"training.save_checkpoints_steps={min(max_steps, save_steps)}"]
    run = run_launch(workdir, "default_", DEFAULT_CONFIG, overrides, shape, data_dir, timeout).check("the default run")
    summary = run.summary()
    records = read_progress(str(run.run_dir)).values()
    first_step = min(r["first_step_time"] for r in records)
    last_step = max(r["time"] for r in records)
    evaluations = summary["evaluations"]
    final = evaluations[-1]

    def reached(threshold):
        hit = next((e for e in evaluations if e["accuracy"] >= threshold), None)
        return (hit["time"] - first_step, hit["global_step"]) if hit else (None, None)

    (time_to_99, step_at_99), (time_to_992, step_at_992) = reached(0.99), reached(0.992)
    return {"max_steps": summary["max_steps"], "final_accuracy": final["accuracy"],
            "precision": next((r["precision"] for r in records if r.get("precision")), None),
            "seconds_to_first_step": first_step - run.launched,
            "training_phase_secs": final["time"] - first_step,
            "time_to_99": time_to_99, "step_at_99": step_at_99,
            "time_to_992": time_to_992, "step_at_992": step_at_992,
            "exit_after_last_step": run.exited - last_step,
            "seconds_to_exit": run.exited - run.launched,
            "evaluations": [(e["global_step"], round(e["accuracy"], 4), round(e["time"] - first_step, 1))
                            for e in evaluations]}
