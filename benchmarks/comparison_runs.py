"""The comparison's runs: the trainer, the Keras and PyTorch DDP references and the default config, each once, timed.

The trainer runs through `estimator-mnist launch` on config/local.yaml with
`--set` for what the comparison fixes (ports, precision, learning rate,
batch, steps, threads), so everything else is what a user of that file gets.
The references run benchmarks/keras_reference.py or, in the PyTorch venv,
benchmarks/ddp_reference.py, one process per worker.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from estimator_mnist.config import load_config
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.supervise.run_summary import collect

from common import DEFAULT_CONFIG, REPO, Shape, run_launch, start, wait_all
from tests.ports import free_loopback_ports  # noqa: E402  (common put the repository on the path)
from comparison_figures import Run, summarise, window

KERAS_REFERENCE = REPO / "benchmarks" / "keras_reference.py"
DDP_REFERENCE = REPO / "benchmarks" / "ddp_reference.py"
TORCH_PYTHON = Path(os.environ.get("ESTIMATOR_MNIST_TORCH_VENV", REPO / ".venv-torch"), "bin", "python")


def run_trainer(workdir: Path, data_dir: str, workers: int, steps: int, batch: int, precision: str,
                threads: Sequence, learning_rate: float, warmup: int, timeout: float, extra: Sequence[str] = ()) -> Run:
    """chief + workers - 1 + evaluator under multi_worker_mirrored, on the reference's work (no dropout,
    one-hot targets); `extra` --set texts come last (step_timeline.py's training.trace_step)."""
    overrides = ["strategy.name=multi_worker_mirrored", f"model.precision={precision}", "model.lr_schedule=constant",
                 f"model.learning_rate={learning_rate}", "model.dropout=0.0",
                 # The references score their weights themselves, not a moving average of them.
                 "model.weight_average_decay=0", "model.label_smoothing=0",
                 # ... and feed the network the [0, 1] pixels, with Adam's usual betas, as the references do.
                 "model.normalise_inputs=false", "model.adam_beta1=0.9", "model.adam_beta2=0.999",
                 f"tasks.all.intra_op_threads={threads[0]}", f"tasks.all.inter_op_threads={threads[1]}",
                 f"training.batch_size_per_replica={batch}", f"training.max_steps={steps}",
                 f"training.save_checkpoints_steps={steps}",
                 # Score the final checkpoint at once: the time to exit includes that evaluation.
                 "evaluation.start_delay_secs=0", "evaluation.throttle_secs=0",
                 # A failure must show, not be hidden by a restart that doubles the times.
                 "restart.policy=never", *extra]
    run = run_launch(workdir, f"trainer_{workers}w_", DEFAULT_CONFIG, overrides,
                     Shape(chief=1, workers=workers - 1, evaluator=True), data_dir, timeout).check("the trainer")
    return summarise("trainer", workers, batch, precision, run.launched, run.exited, run.run_dir,
                     window(steps, warmup), run.summary()["accuracy"])


def _run_workers(workdir: Path, system: str, what: str, workers: int, command, env: Optional[dict], steps: int,
                 batch: int, precision: str, warmup: int, timeout: float, attempts: int = 3) -> Run:
    """One process per worker of a reference, `command(index, ports, run_dir, accuracy_path)` each, retried on
    fresh loopback ports when another program took one between the choice and the start."""
    for _ in range(attempts):
        run_dir = Path(tempfile.mkdtemp(prefix=f"{system}_{workers}w_", dir=workdir))
        ports = free_loopback_ports(workers)
        accuracy_path = run_dir / "accuracy.json"
        logs = [run_dir / f"worker-{index}.log" for index in range(workers)]
        launched = time.time()
        processes = [start(command(index, ports, run_dir, accuracy_path), log, env=env)
                     for index, log in enumerate(logs)]
        exited = wait_all(processes, timeout)
        text = "".join(p.read_text(errors="replace") for p in logs)
        if any(p.returncode != 0 for p in processes):
            if "address already in use" in text.lower():
                continue
            raise SystemExit(f"{what} failed in {run_dir}:\n{text[-3000:]}")
        accuracy = json.loads(accuracy_path.read_text()).get("accuracy")
        return summarise(system, workers, batch, precision, launched, exited, run_dir, window(steps, warmup), accuracy)
    raise SystemExit(f"no free ports for {what} after {attempts} attempts")


def run_reference(workdir: Path, data_dir: str, workers: int, steps: int, batch: int, precision: str,
                  threads: Sequence, learning_rate: float, warmup: int, timeout: float,
                  onednn: Optional[bool] = None) -> Run:
    """One keras_reference.py process per worker. `onednn` True or False exports TF_ENABLE_ONEDNN_OPTS=1 or 0 to it;
    None (the default) leaves it what TensorFlow alone picks on this CPU, as Keras users get it."""
    def command(index, ports, run_dir, accuracy_path):
        return [sys.executable, str(KERAS_REFERENCE), "--workers", ",".join(f"localhost:{p}" for p in ports),
                "--index", str(index), "--steps", str(steps), "--batch", str(batch), "--precision", precision,
                "--learning-rate", str(learning_rate), "--intra", str(threads[0]), "--inter", str(threads[1]),
                "--data-dir", data_dir, "--run-dir", str(run_dir), "--accuracy-out", str(accuracy_path)]

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1")
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    return _run_workers(workdir, "reference", "the Keras reference", workers, command, env, steps, batch, precision,
                        warmup, timeout)


def torch_available() -> bool:
    """Whether benchmarks/setup_pytorch.sh made the PyTorch venv the DDP reference runs in."""
    return TORCH_PYTHON.is_file()


def run_ddp(workdir: Path, data_dir: str, workers: int, steps: int, batch: int, precision: str,
            threads: Sequence, learning_rate: float, warmup: int, timeout: float) -> Run:
    """One ddp_reference.py process per worker in the PyTorch venv, on input_fn's batches saved by ddp_data."""
    from ddp_data import shards, test_set  # pylint: disable=import-outside-toplevel

    if precision != "float32":
        raise SystemExit("the DDP reference trains in float32 only")
    saved = workdir / "ddp_data"
    saved.mkdir(exist_ok=True)
    data, test = shards(data_dir, workers, steps, batch, saved), test_set(data_dir, saved)

    def command(index, ports, run_dir, accuracy_path):
        # Rank 0's port is the rendezvous; the others go unused.
        return [str(TORCH_PYTHON), str(DDP_REFERENCE), "--workers", str(workers), "--index", str(index),
                "--port", str(ports[0]), "--data", str(data[index]), "--test", str(test), "--steps", str(steps),
                "--batch", str(batch), "--learning-rate", str(learning_rate), "--intra", str(threads[0]),
                "--inter", str(threads[1]), "--run-dir", str(run_dir), "--accuracy-out", str(accuracy_path)]

    return _run_workers(workdir, "ddp", "the DDP reference", workers, command, None, steps, batch, precision,
                        warmup, timeout)


def default_run(workdir: Path, data_dir: str, shape: Shape, max_steps: Optional[int], save_steps: int,
                timeout: float, precision: Optional[str] = None) -> dict:
    """config/local.yaml as shipped (on fresh loopback ports), timed from its first step.

    `max_steps` shortens it (smoke runs); a checkpoint is then saved by the
    last step at the latest, so that there is something to evaluate.
    `precision` sets model.precision (an emulated CPU's choice); None leaves it `auto`.
    """
    overrides = [] if max_steps is None else [f"training.max_steps={max_steps}",
                                              f"training.save_checkpoints_steps={min(max_steps, save_steps)}"]
    overrides += [] if precision is None else [f"model.precision={precision}"]
    run = run_launch(workdir, "default_", DEFAULT_CONFIG, overrides, shape, data_dir, timeout).check("the default run")
    facts = collect(str(run.run_dir))  # what `estimator-mnist summary` reports, from the same records
    records = read_progress(str(run.run_dir)).values()
    first_step = min(r["first_step_time"] for r in records)
    final = facts["evaluations"][-1]

    def reached(threshold: str):
        hit = facts["seconds_to_accuracy"][threshold]
        return (hit["seconds"], hit["step"]) if hit else (None, None)

    (time_to_99, step_at_99), (time_to_992, step_at_992) = reached("0.99"), reached("0.992")
    # Synchronous training: every trainer's batch goes into each step.
    global_batch = load_config(str(DEFAULT_CONFIG)).training.batch_size_per_replica * (shape.chief + shape.workers)
    return {"max_steps": run.summary()["max_steps"], "final_accuracy": final["accuracy"],
            "precision": facts["precision"], "seconds_to_first_step": first_step - run.launched,
            "training_phase_secs": final["seconds"], "time_to_99": time_to_99, "step_at_99": step_at_99,
            "time_to_992": time_to_992, "step_at_992": step_at_992,
            "images_at_992": None if step_at_992 is None else step_at_992 * global_batch,
            "exit_after_last_step": run.exited - max(r["time"] for r in records),
            "seconds_to_exit": run.exited - run.launched,
            "evaluations": [(e["step"], round(e["accuracy"], 4), round(e["seconds"], 1)) for e in facts["evaluations"]]}
