"""`estimator-mnist sweep --slurm`: the batch script of a job array that runs a sweep, one array task per trial.

Each array task is `estimator-mnist sweep` with the same flags and
`--array-task`: it finds its trial from SLURM_ARRAY_TASK_ID and runs it as one
single-process srun step from its TaskSpec, planned on its node for the CPUs
and GPUs Slurm gave it (sweep/array_task.py). `%K` is --parallel. Only the
trials not yet finished or stopped are in `--array`; an array task whose trial
is done exits 0 at once, so the same script submitted again trains nothing.
`--signal=B:TERM@N` and `--requeue`: an array task signalled before its time
limit or preempted stops its trial at a saved step and requeues itself.
Writing the script never contacts Slurm. No TensorFlow.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from estimator_mnist.errors import UsageError
from estimator_mnist.sweep import layout
from estimator_mnist.slurm.batch_script import ERR_NOT_OPTION, ERR_OPTION, SIGNAL_MARGIN_SECS

DEFAULT_MEMORY = "4G"  # a trial's TensorFlow process peaks near 2 GB on MNIST; room for the rest
LOG_DIR = layout.SLURM_LOG_DIR  # <sweep_dir>/slurm-logs/<array job>_<index>.out: each array task's output
OWN_OPTIONS = {
    "-a": "the trials (the sweep's --param, --samples)", "--array": "the trials; %K is --parallel",
    "-n": "nothing: a trial is one task", "--ntasks": "nothing: a trial is one task", "-N": "nothing",
    "--nodes": "nothing: a trial runs on one node", "-c": "--cores-per-trial", "--cpus-per-task": "--cores-per-trial",
    "--mem": "--mem-per-trial", "--gpus-per-task": "--gpus-per-trial", "--gpus": "--gpus-per-trial",
    "-J": "--job-name", "--job-name": "--job-name", "-p": "--partition", "--partition": "--partition",
    "-t": "--time", "--time": "--time", "-A": "--account", "--account": "--account",
    "--signal": "training.preemption_grace_secs", "--no-requeue": "nothing: a preempted trial requeues",
    "-o": "nothing: each array task writes to " + LOG_DIR, "--output": "nothing: each array task writes to " + LOG_DIR,
    "--open-mode": "nothing",
}
ERR_LOCAL_ONLY = "{flag} places trials on this machine's devices; with --slurm, Slurm places them: use {instead}"


@dataclass(frozen=True)
class ArrayOptions:
    parallel: Optional[int] = None      # %K: array tasks at a time (None: as many as Slurm allows)
    cpus: int = 1                       # --cpus-per-task of each trial
    memory: str = DEFAULT_MEMORY        # --mem of each trial
    gpus: int = 0                       # --gpus-per-task of each trial
    job_name: Optional[str] = None
    partition: Optional[str] = None
    time: Optional[str] = None
    account: Optional[str] = None
    extra: Tuple[str, ...] = ()


def check_extra(extra: Sequence[str]) -> None:
    for option in extra:
        if not option.startswith("-"):
            raise UsageError(ERR_NOT_OPTION.format(option=option))
        name = option.split("=", 1)[0]
        name = name[:2] if not name.startswith("--") else name
        if name in OWN_OPTIONS:
            raise UsageError(ERR_OPTION.format(option=option, instead=OWN_OPTIONS[name]))


def array_spec(indices: List[int], parallel: Optional[int]) -> str:
    """'0-3%2', or '1,3%2' for the trials left: Slurm's --array of `indices`."""
    runs, start = [], None
    for i, index in enumerate(indices):
        start = index if start is None else start
        if i + 1 == len(indices) or indices[i + 1] != index + 1:
            runs.append(f"{start}" if start == index else f"{start}-{index}")
            start = None
    return ",".join(runs) + (f"%{parallel}" if parallel else "")


def render(sweep_args: List[str], sweep_dir: str, indices: List[int], grace_secs: int, options: ArrayOptions,
           name: str, python: str = sys.executable) -> str:
    """The batch script: `sweep_args` are the sweep's flags (absolute paths), run again in each array task."""
    check_extra(options.extra)
    given = [("job-name", options.job_name or name), ("array", array_spec(indices, options.parallel)),
             ("ntasks", 1), ("cpus-per-task", options.cpus), ("mem", options.memory),
             ("gpus-per-task", options.gpus or None), ("partition", options.partition), ("time", options.time),
             ("account", options.account), ("output", f"{sweep_dir}/{LOG_DIR}/%A_%a.out")]
    lines = [f"#SBATCH --{key}={value}" for key, value in given if value is not None]
    lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append",
              f"#SBATCH --signal=B:TERM@{grace_secs + SIGNAL_MARGIN_SECS}   # training.preemption_grace_secs "
              f"{grace_secs} s + {SIGNAL_MARGIN_SECS} s", *(f"#SBATCH {o}" for o in options.extra)]
    command = [python, "-m", "estimator_mnist", "sweep", *sweep_args, "--array-task"]
    return "\n".join([
        "#!/bin/bash",
        "# Written by `estimator-mnist sweep --slurm`; submit it with sbatch. One array task per trial.",
        *lines,
        "#",
        f"# Shared storage: the sweep directory {sweep_dir} must be on storage every node sees (NFS, Lustre",
        "# mounted with flock, ...): every trial writes its checkpoints and evaluations there, and each array task",
        "# reads the others' to apply the median rule and updates sweep.json under a lock. The base YAML and this",
        "# Python must be at the same paths on every node, and MNIST prepared in data_dir on every node (or shared).",
        "# `estimator-mnist sweep-status --sweep-dir DIR` shows the sweep while it runs.",
        "set -u",
        "exec " + " ".join(shlex.quote(a) for a in command),
        ""])
