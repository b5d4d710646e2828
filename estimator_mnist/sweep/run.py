"""`estimator-mnist sweep` itself: the plan checked before any trial starts, then the run on this machine, or the
batch script of a Slurm job array (`--slurm`) that runs it on a cluster. No TensorFlow.

--sweep-dir may be gs://BUCKET/PATH for a sweep on this machine: the records others read (sweep.json,
sweep.csv, best.yaml, each trial's trial.yaml and model_dir) go to the bucket, and each trial's run_dir (its
log, spec and run summary), which is always local, to runs/sweep-logs/BUCKET/PATH/<trial> (local_root).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from estimator_mnist import storage
from estimator_mnist.config import config_from_dict, read_yaml
from estimator_mnist.mnist_data.prepare import ERR_NOT_PREPARED, is_prepared
from estimator_mnist.errors import UsageError
from estimator_mnist.storage.urls import split
from estimator_mnist.slurm.sweep_script import ArrayOptions, render
from estimator_mnist.supervise.run_summary import THRESHOLDS
from estimator_mnist.sweep import layout, records, shared
from estimator_mnist.sweep.devices import choose_devices
from estimator_mnist.sweep.scheduler import SweepPlan, SweepRunner
from estimator_mnist.sweep.space import expand, parse_params
from estimator_mnist.sweep.table import SweepConsole
from estimator_mnist.sweep.trials import command, make_trial, write_trial_yaml

ERR_SWEEP_DIR = "--sweep-dir {dir}: {reason}; give a directory this user can create and write"
ERR_SLURM_BUCKET = ("--sweep-dir {dir}: a Slurm sweep keeps its records, the array tasks' output and the base YAML "
                    "on a directory every node mounts (NFS, Lustre); give such a --sweep-dir with --slurm, or run "
                    "the sweep on one machine (without --slurm), which keeps its records in the bucket")


def default_sweep_dir(cluster_file: str) -> Path:
    return Path("runs", f"sweep-{Path(cluster_file).stem}")


def sweep_location(sweep_dir: Optional[str], cluster_file: str, slurm: bool) -> tuple:
    """(the sweep directory: an absolute path or a gs:// URL, the local root of its trials' run_dirs or None when
    they are in the sweep directory itself); other schemes, and a bucket under Slurm, refused in one line."""
    directory = records.location(sweep_dir or default_sweep_dir(cluster_file))
    if not storage.is_bucket(directory):
        return directory, None
    url = directory
    if slurm:
        raise UsageError(ERR_SLURM_BUCKET.format(dir=url))
    bucket, name = split(url)
    return url, layout.local_trials_root(bucket, name)


def build_plan(cluster_file: str, param_texts: Sequence[str], samples: Optional[int] = None, seed: int = 0,
               parallel: Optional[int] = None, cores_per_trial: Optional[int] = None,
               devices_text: Optional[str] = None, early_stop: str = "none", sweep_dir: Optional[str] = None,
               allowed=None, gpus=None, slurm: bool = False) -> SweepPlan:
    """Everything checked before any trial starts: the base YAML, every trial's config, the devices (none under
    Slurm, which places the trials itself)."""
    base_data = read_yaml(cluster_file)
    base_config = config_from_dict(base_data, cluster_file)
    params = parse_params(param_texts)
    values = expand(params, samples, seed)
    devices = [] if slurm else choose_devices(devices_text, cores_per_trial, parallel, allowed, gpus)
    directory, local_root = sweep_location(sweep_dir, cluster_file, slurm)
    trials = [make_trial(records.trial_name(i), v, directory, base_data, base_config.data_dir, local_root)
              for i, v in enumerate(values)]
    ident = records.identity(base_data, [p.text for p in params], samples, seed)
    return SweepPlan(directory, cluster_file, base_data, trials, devices, early_stop, ident, THRESHOLDS)


def run_sweep(plan: SweepPlan, out=None, command_for=None, **runner_options) -> int:
    data_dir = plan.trials[0].data["data_dir"]
    if command_for is None and not is_prepared(data_dir):
        raise UsageError(ERR_NOT_PREPARED.format(data_dir=data_dir, reason="no prepared dataset found"))
    try:
        storage.makedirs(plan.sweep_dir)  # nothing to make on a bucket
    except OSError as exc:
        raise UsageError(ERR_SWEEP_DIR.format(dir=plan.sweep_dir, reason=exc.strerror or exc)) from None
    runner = SweepRunner(plan, SweepConsole(out), command_for or command, **runner_options)
    runner.save(force=True)  # before any trial starts: a bucket that is missing or denied is named now
    return runner.run()


def _make_dir(plan: SweepPlan) -> None:
    try:
        os.makedirs(layout.slurm_log_dir(plan.sweep_dir), exist_ok=True)  # --slurm: a local directory
    except OSError as exc:
        raise UsageError(ERR_SWEEP_DIR.format(dir=plan.sweep_dir, reason=exc.strerror or exc)) from None


def array_script(plan: SweepPlan, sweep_args: Sequence[str], options: ArrayOptions, err=None) -> str:
    """`sweep --slurm`: the sweep's record started (or checked: another sweep there is refused), every trial's
    trial.yaml written, and the batch script of the job array of the trials not yet done."""
    _make_dir(plan)
    record = shared.start_or_resume(plan.sweep_dir, plan.identity, [t.values for t in plan.trials],
                                    plan.ranked_by)
    for trial in plan.trials:
        write_trial_yaml(trial)
    states = {row["trial"]: row["state"] for row in record["trials"]}
    left = [i for i, t in enumerate(plan.trials) if states[t.name] not in records.DONE_STATES]
    note = (f"sweep: {len(plan.trials)} trials in {plan.sweep_dir}: {len(left)} to run"
            + (f" ({len(plan.trials) - len(left)} already done)" if len(left) < len(plan.trials) else ""))
    if not left:
        note += "; every trial is done: each array task of this script exits 0 at once"
    print(note, file=err or sys.stderr, flush=True)
    grace = max(config_from_dict(t.data, t.name).training.preemption_grace_secs for t in plan.trials)
    return render(list(sweep_args), plan.sweep_dir, left or list(range(len(plan.trials))), grace, options,
                  name=f"sweep-{Path(plan.base_file).stem.lower().replace('_', '-')}")
