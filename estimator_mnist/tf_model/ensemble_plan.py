"""What `estimator-mnist ensemble` builds, checked before TensorFlow loads: the members, their checkpoints and
devices. No TensorFlow.

The candidates are every finished trial of a sweep (sweep.json), each with
the network its trial trained (from its trial.yaml) and its final
checkpoint; ensemble.py then selects members among them greedily on the
validation split (ensemble_selection.py). With --top K the members are the K
best by the sweep's ranking (its validation accuracy), each of weight 1.
Each member is placed on a device of its own while there are devices: a GPU
each on a GPU machine, else the CPU, or the devices given.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Tuple

from estimator_mnist import storage
from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import config_from_dict
from estimator_mnist.config.load import parse_yaml
from estimator_mnist.config.schema import ModelConfig
from estimator_mnist.errors import UsageError
from estimator_mnist.sweep import layout, records
from estimator_mnist.sweep.devices import visible_gpus

ERR_DEVICE = ("--devices {text!r}: {item!r} is not a device; write gpu:0,gpu:1 (a GPU each) or cpu:0,cpu:1 "
              "(logical CPU devices of this process)")
ERR_GPU = ("--devices {text!r}: gpu:{index} is not visible (visible GPUs: {visible}); pick from those, or use cpu:0")
ERR_NO_SPLIT = ("{dir}: the sweep's trials hold out no validation split (data.validation_examples: 0), and greedy "
                "selection must not choose on the test set; run the sweep with a split (its default), or pass --top K "
                "to take the K best by test accuracy as they were ranked")
ERR_TRIAL_GONE = ("{trial}: {missing} is missing; the sweep's record says it finished, but its files are gone; run "
                  "the sweep again in a new --sweep-dir, or pick fewer members with --top")


@dataclass(frozen=True)
class Member:
    trial: str
    values: dict
    network: str
    checkpoint: str
    device: str            # a TensorFlow device name: /device:GPU:0, /device:CPU:1
    sweep_accuracy: float  # the trial's own final evaluation on the test set
    sweep_validation_accuracy: Optional[float] = None  # ... and on its validation split
    weight: int = 1        # how many times the selection picked it: its share of the average
    # Its trial's model.normalise_inputs, part of the network it trained; plan_ensemble always passes it, and a
    # Member built by hand gets the key's own default.
    normalise_inputs: bool = ModelConfig.normalise_inputs


@dataclass(frozen=True)
class EnsemblePlan:
    sweep_dir: str  # an absolute path or a gs:// URL
    members: Tuple[Member, ...]  # the candidates (greedy), or the members themselves (--top)
    data_dir: str
    eval_batch_size: int
    logical_cpus: int      # CPU devices the session creates (cpu:1 needs two)
    validation_examples: int = 0  # the trials' held-out rows (splits.py)
    devices: Tuple[str, ...] = ("/device:CPU:0",)
    greedy: bool = False   # select among the candidates on the validation split; else take them all, weight 1

    @property
    def export_base(self) -> str:
        return layout.ensemble_dir(self.sweep_dir)  # <sweep_dir>/ensemble/<timestamp>, as predict --model takes it


def parse_devices(text: str, gpus: List[int]) -> List[str]:
    names = []
    for item in text.split(","):
        kind, _, index = item.strip().partition(":")
        if kind not in ("cpu", "gpu") or not index.isdigit():
            raise UsageError(ERR_DEVICE.format(text=text, item=item))
        if kind == "gpu" and int(index) >= len(gpus):
            raise UsageError(ERR_GPU.format(text=text, index=index, visible=len(gpus) or "none"))
        names.append(f"/device:{kind.upper()}:{int(index)}")
    return names


def placed(members, devices) -> Tuple[Member, ...]:
    """The members, each on the next device in turn."""
    return tuple(dataclasses.replace(m, device=devices[i % len(devices)]) for i, m in enumerate(members))


def plan_ensemble(sweep_dir: str, top: Optional[int] = None, devices_text: Optional[str] = None,
                  gpus: Optional[List[int]] = None) -> EnsemblePlan:
    """The K best trials with `top`; else every finished trial as a candidate for the greedy selection."""
    directory = records.location(sweep_dir)
    record = records.read_sweep(directory)
    if top is None and records.ranked_by(record) != "validation_accuracy":
        raise UsageError(ERR_NO_SPLIT.format(dir=directory))
    # top_trials refuses, in its one line, a sweep with fewer finished trials (with no --top: with none).
    chosen = records.top_trials(record, directory, top or 1)
    if top is None:
        chosen = records.best_trials(record)
    gpus = visible_gpus() if gpus is None else gpus
    if devices_text:
        devices = parse_devices(devices_text, gpus)
    else:
        # TensorFlow numbers the GPUs it sees from 0.
        devices = [f"/device:GPU:{i}" for i in range(len(gpus))] or ["/device:CPU:0"]
    members, data_dir, eval_batch, held_out = [], None, 1000, 0
    for row in chosen:
        trial_file = layout.trial_file(layout.trial_dir(directory, row["trial"]))
        try:
            text = storage.read_text(trial_file)
        except FileNotFoundError:
            raise UsageError(ERR_TRIAL_GONE.format(trial=row["trial"], missing=trial_file)) from None
        except OSError as exc:
            raise records.storage_failure(exc, trial_file, "reading the trial's settings") from None
        config = config_from_dict(parse_yaml(text, trial_file), trial_file)
        checkpoint = checkpoints.latest_checkpoint(config.model_dir)
        if checkpoint is None:
            raise UsageError(ERR_TRIAL_GONE.format(trial=row["trial"], missing=f"a checkpoint in {config.model_dir}"))
        members.append(Member(row["trial"], row["values"], config.model.network, checkpoint, devices[0],
                              row["accuracy"], row.get("validation_accuracy"),
                              normalise_inputs=config.model.normalise_inputs))
        data_dir, eval_batch, held_out = config.data_dir, config.evaluation.batch_size, config.data.validation_examples
    cpu_indices = [int(d.rsplit(":", 1)[1]) for d in devices if "CPU" in d]
    return EnsemblePlan(directory, placed(members, devices), data_dir, eval_batch, max(cpu_indices, default=0) + 1,
                        held_out, tuple(devices), greedy=top is None)
