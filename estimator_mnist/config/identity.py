"""Who is who in a cluster: an address, a task's identity, and the `cluster:` section's frozen dataclass.

Split from schema.py, which holds the sections' settings; these three name
the tasks rather than configure them. No TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, order=True)
class TaskId:
    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def is_evaluator(self) -> bool:
        return self.type == "evaluator"

    @property
    def is_trainer(self) -> bool:
        """Runs training steps: the chief and the workers (not ps, not the evaluator)."""
        return self.type in ("chief", "worker")


@dataclass(frozen=True)
class ClusterConfig:
    """Who trains where. `evaluator` is a host only: it runs no server."""

    chief: Tuple[Address, ...] = ()
    worker: Tuple[Address, ...] = ()
    ps: Tuple[Address, ...] = ()
    evaluator: Optional[str] = None

    def addresses(self, role: str) -> Tuple[Address, ...]:
        return getattr(self, role)

    def tasks(self) -> List[TaskId]:
        """Every task, in the order the launcher starts them: ps first, the evaluator last."""
        tasks = [TaskId(role, i) for role in ("ps", "chief", "worker") for i in range(len(self.addresses(role)))]
        return tasks + ([TaskId("evaluator", 0)] if self.evaluator is not None else [])

    def server_tasks(self) -> List[TaskId]:
        """The tasks that run a TF server (all but the evaluator), in start order."""
        return [t for t in self.tasks() if not t.is_evaluator]

    def address(self, task: TaskId) -> Address:
        return self.addresses(task.type)[task.index]

    def host(self, task: TaskId) -> str:
        return self.evaluator if task.is_evaluator else self.address(task).host

    @property
    def chief_task(self) -> TaskId:
        """The task that saves checkpoints: the chief, or worker 0 when there is none."""
        return TaskId("chief", 0) if self.chief else TaskId("worker", 0)

    @property
    def num_workers(self) -> int:
        """Training replicas' machines: the chief counts as a worker."""
        return len(self.chief) + len(self.worker)
