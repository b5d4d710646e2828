"""What every task source says (`TaskSource`), and the task resolved from one (`ResolvedTask`), which plans it into
the TaskSpec its TensorFlow process runs with. The sources: --task with the YAML (task_source.py), TF_CONFIG
(tf_config_source.py), Slurm's step (slurm_source.py), one process (single_process_source.py). No TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from estimator_mnist.config import Config, TaskId
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.plan.task_spec import TaskSpec


@dataclass(frozen=True)
class TaskSource:
    data: dict                          # the YAML data, with the cluster this source supplies
    task: TaskId
    tf_config: Optional[dict] = None    # the TF_CONFIG TensorFlow gets, from a cluster manager's; None: the YAML's
    gpus_from_manager: bool = False     # a cluster manager gave the task its GPUs: count them, do not mask
    own_cpus: Optional[int] = None      # the CPUs a cluster manager gave this task alone (Slurm), or None
    note: Optional[str] = None          # for the task's log: what the source changed
    by_hand: bool = False               # --task: started by a person or by `launch`, not by a cluster manager
    shares_port: bool = False           # this process holds the server's port: TensorFlow binds it beside (Slurm)


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
                         gpus_from_manager=source.gpus_from_manager, own_cpus=source.own_cpus,
                         shares_port=source.shares_port)
        return TaskSpec(config=self.config, plan=plan, notes=(source.note,) if source.note else ())
