"""`estimator-mnist sweep` itself: the plan checked before any trial starts, then the run. No TensorFlow."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from estimator_mnist.config import config_from_dict, read_yaml
from estimator_mnist.mnist_data.prepare import ERR_NOT_PREPARED, is_prepared
from estimator_mnist.errors import UsageError
from estimator_mnist.supervise.run_summary import THRESHOLDS
from estimator_mnist.sweep import records
from estimator_mnist.sweep.devices import choose_devices
from estimator_mnist.sweep.scheduler import SweepPlan, SweepRunner
from estimator_mnist.sweep.space import expand, parse_params
from estimator_mnist.sweep.table import SweepConsole
from estimator_mnist.sweep.trials import command, make_trial

ERR_SWEEP_DIR = "--sweep-dir {dir}: {reason}; give a directory this user can create and write"


def default_sweep_dir(cluster_file: str) -> Path:
    return Path("runs", f"sweep-{Path(cluster_file).stem}")


def build_plan(cluster_file: str, param_texts: Sequence[str], samples: Optional[int] = None, seed: int = 0,
               parallel: Optional[int] = None, cores_per_trial: Optional[int] = None,
               devices_text: Optional[str] = None, early_stop: str = "none", sweep_dir: Optional[str] = None,
               allowed=None, gpus=None) -> SweepPlan:
    """Everything checked before any trial starts: the base YAML, every trial's config, the devices."""
    base_data = read_yaml(cluster_file)
    base_config = config_from_dict(base_data, cluster_file)
    params = parse_params(param_texts)
    values = expand(params, samples, seed)
    devices = choose_devices(devices_text, cores_per_trial, parallel, allowed, gpus)
    directory = Path(os.path.abspath(sweep_dir or default_sweep_dir(cluster_file)))
    trials = [make_trial(records.trial_name(i), v, directory, base_data, base_config.data_dir)
              for i, v in enumerate(values)]
    ident = records.identity(base_data, [p.text for p in params], samples, seed)
    return SweepPlan(directory, cluster_file, base_data, trials, devices, early_stop, ident, THRESHOLDS)


def run_sweep(plan: SweepPlan, out=None, command_for=None, **runner_options) -> int:
    data_dir = plan.trials[0].data["data_dir"]
    if command_for is None and not is_prepared(data_dir):
        raise UsageError(ERR_NOT_PREPARED.format(data_dir=data_dir, reason="no prepared dataset found"))
    try:
        plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(ERR_SWEEP_DIR.format(dir=plan.sweep_dir, reason=exc.strerror or exc)) from None
    return SweepRunner(plan, SweepConsole(out), command_for or command, **runner_options).run()
