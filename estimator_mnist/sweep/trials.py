"""One trial: its YAML, its TaskSpec, and what it achieved, read from its own records. No TensorFlow.

A trial is the single-process job (strategy one_device) of `trial.yaml`,
which trains, evaluates each checkpoint on its validation split and the
whole test set and exports, in its own directory. It starts as every task
does: from a TaskSpec (`trial.spec.json`, `train --spec`), planned where it
runs: by the local scheduler for the trial's device (its cores, or its own
GPU), or by the trial's Slurm array task for what Slurm gave it
(sweep/array_task.py). trial.yaml itself carries no device. Started again on
the same directory, a trial resumes from its newest checkpoint. Unless the
base YAML or a --param sets data.validation_examples, a trial holds out the
last DEFAULT_VALIDATION_EXAMPLES training images (splits.py): the sweep
chooses on them, never on the test set.

What others read lives in the trial's `records` directory, <sweep_dir>/<trial>:
trial.yaml (the ensemble), model/ (checkpoints, eval_results.jsonl: the
median rule, sweep-status, the ensemble) and, when that is a bucket, the
progress records (Config.records_dir). What only the process that runs it
needs lives in its local `directory` (its run_dir): trial.log, its spec,
run_summary.json. The two are one directory unless the sweep directory is a
bucket (gs://): run_dir is always local (config/load.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from estimator_mnist.config import TaskId, apply_overrides, config_from_dict
from estimator_mnist.model_files import checkpoints
from estimator_mnist.model_files.layout import RUN_SUMMARY_FILE as SUMMARY_FILE
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.plan.task_spec import TaskSpec
from estimator_mnist.storage import write_json, write_atomic
from estimator_mnist.sweep import layout
from estimator_mnist.sweep.layout import LOG_FILE, SPEC_FILE, TRIAL_FILE
from estimator_mnist.sweep.space import as_overrides

TRIAL_TASK = TaskId("chief", 0)  # a trial is one process: the chief of a cluster of one
UNUSED_ADDRESS = "localhost:2222"  # a single-process job starts no server: the port is never opened
DEFAULT_VALIDATION_EXAMPLES = 5000


@dataclass(frozen=True)
class Trial:
    name: str
    values: Dict[str, object]
    directory: Path      # its run_dir, always local: its log, spec and run summary
    data: dict           # the trial's YAML data
    max_steps: int
    batch: int           # its global batch: one replica
    validation_examples: int = 0  # its held-out rows (data.validation_examples): 0 leaves only the test set
    max_restarts: int = 0  # restart.max_restarts: the retryable failures an array task runs it again after
    shared: Optional[str] = None  # <sweep_dir>/<trial> when that is not `directory` (a gs:// sweep directory)

    @property
    def records(self) -> str:
        """Where what others read lives: trial.yaml, model/ (and progress/ when that is a bucket)."""
        return self.shared or str(self.directory)

    @property
    def model_dir(self) -> str:
        return layout.trial_model_dir(self.records)

    @property
    def records_dir(self) -> str:
        """Where its progress records go, as Config.records_dir puts them."""
        return records_dir(self.records)

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE


def records_dir(records: str) -> str:
    """The progress records of the trial whose records are in `records`: model/ on a bucket, else there."""
    return layout.trial_records_dir(records)


def trial_data(base: dict, values: Dict[str, object], directory: Path, data_dir: str,
               model_dir: Optional[str] = None) -> dict:
    """The base settings with the trial's values, as one process with its own directories."""
    data = apply_overrides(base, as_overrides(values))
    tasks = data.get("tasks") if isinstance(data.get("tasks"), dict) else {}
    every = tasks.get("all")  # per-role and per-task settings name tasks a single process lacks
    data.update(cluster={"chief": [UNUSED_ADDRESS]}, strategy="one_device", tasks={"all": every} if every else None,
                run_dir=str(directory), model_dir=model_dir or layout.trial_model_dir(directory), data_dir=data_dir)
    held_out = dict(data.get("data") or {})
    held_out.setdefault("validation_examples", DEFAULT_VALIDATION_EXAMPLES)  # the user's value, 0 included, stands
    data["data"] = held_out
    if data["tasks"] is None:
        del data["tasks"]
    return data


def with_gpus(data: dict, gpus: Optional[List[int]]) -> dict:
    """The trial's data with `tasks.all.gpus` set: [i] its own GPU, [] none at all (a CPU trial must not take a
    GPU); None leaves the GPUs to whoever started it (Slurm's CUDA_VISIBLE_DEVICES)."""
    if gpus is None:
        return data
    every = dict((data.get("tasks") or {}).get("all") or {})
    every["gpus"] = list(gpus)
    return {**data, "tasks": {"all": every}}


def make_trial(name: str, values: dict, sweep_dir, base: dict, data_dir: str, local_root=None) -> Trial:
    """The trial, validated as a whole config (so a bad combination is refused before any trial starts);
    `local_root` holds its run_dir when the sweep directory is a bucket."""
    shared = layout.trial_dir(sweep_dir, name) if local_root is not None else None
    directory = Path(local_root if local_root is not None else sweep_dir) / name
    data = trial_data(base, values, directory, data_dir, layout.trial_model_dir(shared) if shared else None)
    values_text = ", ".join(as_overrides(values))
    config = config_from_dict(data, str(directory / TRIAL_FILE), f"{name} ({values_text})")
    return Trial(name, values, directory, data, config.training.max_steps, config.training.batch_size_per_replica,
                 config.data.validation_examples, config.restart.max_restarts, shared)


def write_trial_yaml(trial: Trial) -> str:
    """<trial>/trial.yaml in its records: the trial's settings, the same wherever it runs (its device is in its
    spec), replaced whole: the ensemble may read it meanwhile."""
    import yaml  # Imported here so `--help` stays instant.

    trial.directory.mkdir(parents=True, exist_ok=True)
    return write_atomic(layout.trial_file(trial.records),
                        f"# {trial.name} of a sweep: one process, written by estimator-mnist sweep\n"
                        + yaml.safe_dump(trial.data, sort_keys=False))


def trial_spec(trial: Trial, gpus: Optional[List[int]] = None, cpu_set: Optional[Sequence[int]] = None,
               own_cpus: Optional[int] = None, gpus_from_manager: bool = False) -> TaskSpec:
    """The trial's TaskSpec where it runs: `gpus` as in with_gpus, `cpu_set` the cores it is pinned to (default:
    this process's), `own_cpus` the CPUs Slurm gave it, `gpus_from_manager` when Slurm gave it its GPUs."""
    config = config_from_dict(with_gpus(trial.data, gpus), str(trial.directory / TRIAL_FILE))
    plan = plan_task(config, TRIAL_TASK, cpu_set=cpu_set, own_cpus=own_cpus, gpus_from_manager=gpus_from_manager)
    return TaskSpec(config=config, plan=plan)


def write_spec(trial: Trial, spec: TaskSpec) -> Path:
    """<trial>/trial.spec.json, which `train --spec` runs (again at a resume: planned anew where it runs)."""
    trial.directory.mkdir(parents=True, exist_ok=True)
    return write_atomic(trial.directory / SPEC_FILE, spec.to_json() + "\n")


def command(trial: Trial) -> List[str]:
    return [sys.executable, "-m", "estimator_mnist", "train", "--spec", str(trial.directory / SPEC_FILE)]


def chooses_by(trial: Trial) -> str:
    """The evaluation figure the sweep stops and ranks this trial on: its validation accuracy when it has a split."""
    return "validation_accuracy" if trial.validation_examples else "accuracy"


def evaluations(trial: Trial) -> List[tuple]:
    """(step, the figure it is chosen by) of every evaluation so far, ascending steps."""
    key = chooses_by(trial)
    return sorted((r["global_step"], r[key]) for r in checkpoints.read_eval_results(str(trial.model_dir))
                  if r.get(key) is not None)


def live(records) -> dict:
    """The step and latest accuracies (test, and validation when it has a split) of the trial whose records are
    in `records` (<sweep_dir>/<trial>) while it runs, from those records."""
    record = read_progress(records_dir(str(records))).get("chief:0") or {}
    evaluated = checkpoints.read_eval_results(layout.trial_model_dir(str(records)))
    latest = max(evaluated, key=lambda r: r["global_step"]) if evaluated else {}
    return {"global_step": record.get("global_step"), "accuracy": latest.get("accuracy"),
            "validation_accuracy": latest.get("validation_accuracy"), "cpus_seen": record.get("cpus")}


def outcome(trial: Trial) -> dict:
    """Final accuracy, time to each threshold, images/s: the run summary of the trial's directory."""
    from estimator_mnist.supervise.run_summary import facts_of

    progress = read_progress(trial.records_dir)
    evaluated = checkpoints.read_eval_results(trial.model_dir)
    if not progress or not (evaluated or checkpoints.latest_checkpoint(trial.model_dir)):
        return {}
    facts = facts_of(trial.model_dir, evaluated, progress)
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
    return write_json(trial.directory / SUMMARY_FILE, summary, indent=2)
