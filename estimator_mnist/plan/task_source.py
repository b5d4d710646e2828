"""Where `train`'s task comes from, resolved once: --task with the YAML, TF_CONFIG, Slurm's step, or one process.

Each source says the same few things (resolved_task.TaskSource): the YAML data with the cluster it supplies,
which task this is, the TF_CONFIG TensorFlow gets when a cluster manager wrote one, whether the manager gave
the task its GPUs, the CPUs it gave the task alone, and a note for the log. `resolve_task` picks the source
and parses the config once; `ResolvedTask.spec` plans the task: the TaskSpec the TensorFlow process runs
with. No TensorFlow.
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple

from estimator_mnist.config import apply_overrides, config_from_dict, load_config, read_yaml
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.resolved_task import ResolvedTask, TaskSource
from estimator_mnist.plan.single_process_source import single_process
from estimator_mnist.plan.slurm_source import from_slurm, in_slurm_step
from estimator_mnist.plan.tf_config_source import from_tf_config
from estimator_mnist.plan.topology import parse_task

ERR_TRAIN_INPUT = ("train needs --cluster FILE (with --task TYPE:INDEX unless the file names a single trainer), or a "
                   "TF_CONFIG environment variable (as Kubeflow's TFJob sets it)")
ERR_TASK_NEEDS_CLUSTER = "train --task needs --cluster FILE, the YAML that defines the task"


def resolve_task(cluster_file: Optional[str], task_text: Optional[str], overrides: Tuple[str, ...],
                 paths: Mapping[str, Optional[str]], environ: Mapping[str, str]) -> ResolvedTask:
    """The config and the task from --cluster and --task; from TF_CONFIG (the YAML supplies everything but the
    cluster); from Slurm's step environment under srun (slurm_source.py); or a single-process job with
    none of them. `paths`: the --model-dir, --data-dir and --run-dir flags (None: the YAML's)."""
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
