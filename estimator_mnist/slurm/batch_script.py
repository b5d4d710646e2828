"""`estimator-mnist slurm`: the batch script that runs the YAML's cluster as one srun step, for `sbatch`.

The script asks for one Slurm task per cluster task and starts them all as one
`srun --kill-on-bad-exit=1` step of `estimator-mnist train` with the same YAML;
each task finds its role from Slurm's environment (plan/slurm_source.py). Around the
step it keeps the exit contract (errors.py):
- 0 ends the job; 1 and 2 end it with that code and one line saying so;
- 200 (retryable) runs the step again, which resumes from the last checkpoint:
  a preemption never counts, failures count as restart.max_restarts failures
  in a row without a newer checkpoint (supervise/slurm_reruns.py; the one record of restarts,
  supervise/restart_budget.py);
- once the step's tasks stopped with 200 or the batch shell got SIGTERM, the script asks Slurm what
  happened before another step (supervise/slurm_job_end.py, slurm_job_state.py): a preemption
  (with or without send_user_signal) requeues the job at once in PreemptMode=REQUEUE, so that it
  vacates its nodes within training.preemption_grace_secs, and ends it with one line in CANCEL mode;
  a time limit's warning (`--signal=B:TERM@N`) or `scancel --batch` requeues it; a job Slurm or an
  operator requeued (a node failure, `scontrol requeue`) is left to resume; a plain `scancel` is
  final; a user's `scancel --signal` or a failed task reruns the step. A step that ended 0, 1 or 2 as
  the signal came ends the job with its code; the job's end removes its records in model_dir.
srun reports a task's own code only in its messages ("task 2: Exited with exit
code 2"): with --kill-on-bad-exit the others are ended by a signal and srun's
status is theirs, so the script reads the tasks' codes from those lines.
Writing the script never contacts Slurm. No TensorFlow.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from estimator_mnist.config import Config, timeouts
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.slurm_source import ordered_tasks

SIGNAL_MARGIN_SECS = timeouts.SLURM_SIGNAL_MARGIN_SECS  # after preemption_grace_secs: the step ends, the requeue is asked for
OWN_OPTIONS = {  # sbatch options the script sets itself: what to use instead
    "-n": "the YAML's cluster (one Slurm task per cluster task)", "--ntasks": "the YAML's cluster",
    "--ntasks-per-node": "--nodes", "-N": "--nodes", "--nodes": "--nodes", "-c": "--cpus-per-task",
    "--cpus-per-task": "--cpus-per-task", "--gpus-per-task": "--gpus-per-task", "-J": "--job-name",
    "--job-name": "--job-name", "-p": "--partition", "--partition": "--partition", "-t": "--time",
    "--time": "--time", "-A": "--account", "--account": "--account", "--signal": "training.preemption_grace_secs",
    "--no-requeue": "nothing: the job requeues itself at preemption", "--open-mode": "nothing",
}
PREPARE_SHARED = '# MNIST once: data_dir is shared\n"${EM[@]}" prepare-data --data-dir "$DATA_DIR"'
PREPARE_EACH = ('# MNIST once on every node of the job\n'
                'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\\n'
                '  "${EM[@]}" prepare-data --data-dir "$DATA_DIR"')
ERR_NODES = ("{file}: --nodes {nodes} is more than the cluster's {count} tasks ({tasks}); every node needs a task: "
             "use --nodes {count} or fewer")
ERR_OPTION = "sbatch option {option!r} contradicts the script: use {instead}"
ERR_NOT_OPTION = "{option!r} is not an sbatch option; pass further sbatch options after --, e.g. -- --qos=high"


@dataclass(frozen=True)
class SbatchOptions:
    job_name: Optional[str] = None
    partition: Optional[str] = None
    time: Optional[str] = None
    account: Optional[str] = None
    nodes: Optional[int] = None
    cpus_per_task: Optional[int] = None
    gpus_per_task: Optional[str] = None
    data_shared: bool = False                 # data_dir is on storage every node sees: prepare it once
    extra: Tuple[str, ...] = ()               # further sbatch options, passed through


def check_options(config: Config, file: str, options: SbatchOptions) -> None:
    """One line (UsageError) for an option that contradicts the YAML or the script."""
    tasks = ordered_tasks(config.cluster.tasks())
    if options.nodes is not None and options.nodes > len(tasks):
        raise UsageError(ERR_NODES.format(file=file, nodes=options.nodes, count=len(tasks),
                                          tasks=", ".join(map(str, tasks))))
    for option in options.extra:
        if not option.startswith("-"):
            raise UsageError(ERR_NOT_OPTION.format(option=option))
        name = option.split("=", 1)[0]
        name = name[:2] if not name.startswith("--") else name  # -n4 is -n
        if name in OWN_OPTIONS:
            raise UsageError(ERR_OPTION.format(option=option, instead=OWN_OPTIONS[name]))


def _directives(config: Config, name: str, options: SbatchOptions) -> list:
    lead = config.training.preemption_grace_secs + SIGNAL_MARGIN_SECS
    given = [("job-name", name), ("partition", options.partition), ("time", options.time),
             ("account", options.account), ("nodes", options.nodes), ("cpus-per-task", options.cpus_per_task),
             ("gpus-per-task", options.gpus_per_task)]
    lines = [f"#SBATCH --ntasks={len(config.cluster.tasks())}"]
    lines += [f"#SBATCH --{key}={value}" for key, value in given if value is not None]
    lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append",
              f"#SBATCH --signal=B:TERM@{lead}   # training.preemption_grace_secs "
              f"{config.training.preemption_grace_secs} s + {SIGNAL_MARGIN_SECS} s"]
    return lines + [f"#SBATCH {option}" for option in options.extra]


def render(config: Config, file: str, overrides: Sequence[str], options: SbatchOptions,
           python: str = sys.executable) -> str:
    """The batch script for `config` (read from `file` with `overrides`)."""
    from estimator_mnist.slurm.script_body import BODY  # pylint: disable=import-outside-toplevel

    check_options(config, file, options)
    name = options.job_name or os.path.splitext(os.path.basename(file))[0].lower().replace("_", "-")
    # The config has resolved the local paths already; a bucket model_dir stays a URL (abspath made it
    # <cwd>/gs:/bucket/...).
    paths = {key: getattr(config, key) for key in ("model_dir", "run_dir", "data_dir")}
    args = ["--cluster", os.path.abspath(file), *(a for o in overrides for a in ("--set", o)),
            *(a for key, path in paths.items() for a in (f"--{key.replace('_', '-')}", path))]
    tasks = ordered_tasks(config.cluster.tasks())
    return BODY.format(
        file=file, directives="\n".join(_directives(config, name, options)),
        python=shlex.quote(python),
        args=" ".join(shlex.quote(a) for a in args), run_dir=shlex.quote(paths["run_dir"]),
        data_dir=shlex.quote(paths["data_dir"]), ntasks=len(tasks), max_restarts=config.restart.max_restarts,
        ranks=", ".join(f"rank {r} {t}" for r, t in enumerate(tasks)),
        prepare=PREPARE_SHARED if options.data_shared else PREPARE_EACH)
