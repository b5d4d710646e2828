"""One trial: its YAML, its process on its device, and what it achieved, read from its own records. No TensorFlow.

A trial is `estimator-mnist train --cluster <trial>/trial.yaml` without
--task: the single-process job (strategy one_device), which trains,
evaluates each checkpoint on its validation split and the whole test set and
exports, in its own directory. Started again on the same directory, it
resumes from its newest checkpoint. Unless the base YAML or a --param sets
data.validation_examples, a trial holds out the last
DEFAULT_VALIDATION_EXAMPLES training images (splits.py): the sweep chooses on
them, never on the test set.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

from estimator_mnist import checkpoints
from estimator_mnist.config import TaskId, apply_overrides, config_from_dict
from estimator_mnist.files import write_json_atomic
from estimator_mnist.supervise.process_group import TaskProcess, start_pinned
from estimator_mnist.progress import read_progress
from estimator_mnist.sweep.devices import Device
from estimator_mnist.sweep.records import TRIAL_FILE
from estimator_mnist.sweep.space import as_overrides

LOG_FILE, SUMMARY_FILE = "trial.log", "run_summary.json"
UNUSED_ADDRESS = "localhost:2222"  # a single-process job starts no server: the port is never opened
DEFAULT_VALIDATION_EXAMPLES = 5000


@dataclass(frozen=True)
class Trial:
    name: str
    values: Dict[str, object]
    directory: Path
    data: dict           # the trial's YAML data
    max_steps: int
    batch: int           # its global batch: one replica
    validation_examples: int = 0  # its held-out rows (data.validation_examples): 0 leaves only the test set

    @property
    def model_dir(self) -> Path:
        return self.directory / "model"

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE


def trial_data(base: dict, values: Dict[str, object], directory: Path, data_dir: str) -> dict:
    """The base settings with the trial's values, as one process with its own directories."""
    data = apply_overrides(base, as_overrides(values))
    tasks = data.get("tasks") if isinstance(data.get("tasks"), dict) else {}
    every = tasks.get("all")  # per-role and per-task settings name tasks a single process lacks
    data.update(cluster={"chief": [UNUSED_ADDRESS]}, strategy="one_device", tasks={"all": every} if every else None,
                run_dir=str(directory), model_dir=str(directory / "model"), data_dir=data_dir)
    held_out = dict(data.get("data") or {})
    held_out.setdefault("validation_examples", DEFAULT_VALIDATION_EXAMPLES)  # the user's value, 0 included, stands
    data["data"] = held_out
    if data["tasks"] is None:
        del data["tasks"]
    return data


def on_device(data: dict, device: Device) -> dict:
    """The trial's data with its device: its own GPU, or none at all (a CPU trial must not take a GPU)."""
    every = dict((data.get("tasks") or {}).get("all") or {})
    every["gpus"] = [device.gpu] if device.kind == "gpu" else []
    return {**data, "tasks": {"all": every}}


def make_trial(name: str, values: dict, sweep_dir: Path, base: dict, data_dir: str) -> Trial:
    """The trial, validated as a whole config (so a bad combination is refused before any trial starts)."""
    directory = sweep_dir / name
    data = trial_data(base, values, directory, data_dir)
    values_text = ", ".join(as_overrides(values))
    config = config_from_dict(data, str(directory / TRIAL_FILE), f"{name} ({values_text})")
    return Trial(name, values, directory, data, config.training.max_steps, config.training.batch_size_per_replica,
                 config.data.validation_examples)


def write_trial_yaml(trial: Trial, device: Device) -> Path:
    import yaml  # Imported here so `--help` stays instant.

    trial.directory.mkdir(parents=True, exist_ok=True)
    path = trial.directory / TRIAL_FILE
    data = on_device(trial.data, device)
    path.write_text(f"# {trial.name} of a sweep, on {device}: one process, written by estimator-mnist sweep\n"
                    + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def command(trial: Trial) -> List[str]:
    return [sys.executable, "-m", "estimator_mnist", "train", "--cluster", str(trial.directory / TRIAL_FILE)]


def start(trial: Trial, device: Device, index: int, argv: List[str]) -> TaskProcess:
    """Starts the trial in its own process group, pinned to its device's cores before exec."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}  # a trial is never part of a cluster
    return start_pinned(TaskId("trial", index), argv, env, trial.log_path,
                        device.cores if device.kind == "cpu" else None)


def chooses_by(trial: Trial) -> str:
    """The evaluation figure the sweep stops and ranks this trial on: its validation accuracy when it has a split."""
    return "validation_accuracy" if trial.validation_examples else "accuracy"


def evaluations(trial: Trial) -> List[tuple]:
    """(step, the figure it is chosen by) of every evaluation so far, ascending steps."""
    key = chooses_by(trial)
    return sorted((r["global_step"], r[key]) for r in checkpoints.read_eval_results(str(trial.model_dir))
                  if r.get(key) is not None)


def live(trial: Trial) -> dict:
    """The trial's step and latest accuracies (test, and validation when it has a split) while it runs."""
    record = read_progress(str(trial.directory)).get("chief:0") or {}
    evaluated = checkpoints.read_eval_results(str(trial.model_dir))
    latest = max(evaluated, key=lambda r: r["global_step"]) if evaluated else {}
    return {"global_step": record.get("global_step"), "accuracy": latest.get("accuracy"),
            "validation_accuracy": latest.get("validation_accuracy"), "cpus_seen": record.get("cpus")}


def outcome(trial: Trial) -> dict:
    """Final accuracy, time to each threshold, images/s: the run summary of the trial's directory."""
    from estimator_mnist.errors import UsageError
    from estimator_mnist.supervise.run_summary import collect

    if not (trial.directory / "progress").is_dir():
        return {}
    try:
        facts = collect(str(trial.directory))
    except UsageError:
        return {}
    final = any(e["step"] >= trial.max_steps for e in facts["evaluations"])
    return {"accuracy": facts["accuracy"], "validation_accuracy": facts["validation_accuracy"], "final": final,
            "global_step": facts["global_step"],
            "images_per_sec": round(facts["images_per_sec"], 1) if facts["images_per_sec"] else None,
            "seconds_to": {k: round(v["seconds"], 1) if v else None for k, v in facts["seconds_to_accuracy"].items()},
            "export": facts["export"]}


def write_summary(trial: Trial, row: dict) -> Path:
    """<trial>/run_summary.json, as a launched run has one: `estimator-mnist summary <trial dir>` then shows the
    trial's state (finished, stopped, failed, interrupted) and why."""
    keys = ("values", "device", "affinity", "cpus_seen", "started", "ended", "exit_code", "attempts", "accuracy",
            "validation_accuracy", "global_step", "export", "seconds_to", "images_per_sec")
    summary = {"status": row["state"], "error": row.get("reason"), "trial": trial.name,
               "cluster_file": str(trial.directory / TRIAL_FILE), "strategy": "one_device",
               "max_steps": trial.max_steps, "run_dir": str(trial.directory), "model_dir": str(trial.model_dir),
               "log": str(trial.log_path), **{k: row.get(k) for k in keys}}
    return write_json_atomic(trial.directory / SUMMARY_FILE, summary, indent=2)
