"""Where `train`'s task comes from, resolved once: --task with the YAML, TF_CONFIG, Slurm's step, or none.

Each source says the same few things (`TaskSource`): the YAML data with the
cluster it supplies, which task this is, the TF_CONFIG TensorFlow gets when
a cluster manager wrote one, whether the manager gave the task its GPUs, the
CPUs it gave the task alone, and a note for the log. `resolve_task` picks
the source, parses the config once, and `ResolvedTask.spec` plans the task:
the TaskSpec the TensorFlow process runs with. No TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

from estimator_mnist.config import Config, TaskId
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.plan.task_spec import TaskSpec

ERR_TRAIN_INPUT = ("train needs --cluster FILE (with --task TYPE:INDEX unless the file names a single trainer), or a "
                   "TF_CONFIG environment variable (as Kubeflow's TFJob sets it)")
ERR_TASK_NEEDS_CLUSTER = "train --task needs --cluster FILE, the YAML that defines the task"


@dataclass(frozen=True)
class TaskSource:
    data: dict                          # the YAML data, with the cluster this source supplies
    task: TaskId
    tf_config: Optional[dict] = None    # the TF_CONFIG TensorFlow gets, from a cluster manager's; None: the YAML's
    gpus_from_manager: bool = False     # a cluster manager gave the task its GPUs: count them, do not mask
    own_cpus: Optional[int] = None      # the CPUs a cluster manager gave this task alone (Slurm), or None
    note: Optional[str] = None          # for the task's log: what the source changed
    by_hand: bool = False               # --task: started by a person or by `launch`, not by a cluster manager


@dataclass(frozen=True)
class ResolvedTask:
    config: Config
    source: TaskSource

    @property
    def task(self) -> TaskId:
        return self.source.task

    def spec(self, cpu_set: Optional[Sequence[int]] = None) -> TaskSpec:
        """The task's TaskSpec, planned from `cpu_set` (default: the CPUs this process may use)."""
        source = self.source
        plan = plan_task(self.config, source.task, source.tf_config, cpu_set=cpu_set,
                         gpus_from_pod=source.gpus_from_manager, own_cpus=source.own_cpus)
        return TaskSpec(config=self.config, plan=plan, notes=(source.note,) if source.note else ())


def resolve_task(cluster_file: Optional[str], task_text: Optional[str], overrides: Tuple[str, ...],
                 paths: Mapping[str, Optional[str]], environ: Mapping[str, str]) -> ResolvedTask:
    """The config and the task from --cluster and --task; from TF_CONFIG (the YAML supplies everything but the
    cluster); from Slurm's step environment under srun (slurm/environment.py); or a single-process job with
    none of them. `paths`: the --model-dir, --data-dir and --run-dir flags (None: the YAML's)."""
    # pylint: disable=import-outside-toplevel
    from estimator_mnist.config import apply_overrides, config_from_dict, load_config, read_yaml
    from estimator_mnist.plan.tf_config_source import from_tf_config, single_process
    from estimator_mnist.plan.topology import parse_task
    from estimator_mnist.plan.slurm_source import from_slurm, in_slurm_step

    if task_text is not None:
        if cluster_file is None:
            raise UsageError(ERR_TASK_NEEDS_CLUSTER)
        config = load_config(cluster_file, overrides, **paths)
        return ResolvedTask(config, TaskSource(data={}, task=parse_task(task_text, config.cluster, cluster_file),
                                               by_hand=True))
    data = apply_overrides(read_yaml(cluster_file) if cluster_file else {}, overrides)
    data.update({k: v for k, v in paths.items() if v is not None})
    tf_config = environ.get("TF_CONFIG")
    if tf_config:
        source = from_tf_config(data, tf_config)
    elif cluster_file is None:
        raise UsageError(ERR_TRAIN_INPUT)
    elif in_slurm_step(environ):
        source = from_slurm(data, cluster_file, environ)
    else:
        source = single_process(data, cluster_file)
    return ResolvedTask(config_from_dict(source.data, cluster_file or "TF_CONFIG"), source)
