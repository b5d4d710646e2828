"""The restart budget: the one owner of restart bookkeeping, against `restart.max_restarts`. No TensorFlow.

Three kinds of manager restart a job's tasks, and all count here:
- `launch` restarts the group itself and records each incident it restarts for (supervise/launch/restarts.py);
- under Kubernetes, Kubeflow's training-operator re-creates a failed pod: a fresh process each time, with
  only model_dir kept. There, the writer task (the chief, or worker 0 without one) records each of its own
  starts of the job in model_dir;
- under Slurm, the batch script runs its step again after a 200, and records each rerun itself in
  model_dir (supervise/slurm_reruns.py): it sees each step's outcome once, also that of a step whose writer never
  started, so the tasks of a Slurm job record no starts (Job.starts_count).
Under either cluster manager, every task started past the budget exits 1 (permanent) with one line naming
the budget and the incidents counted.

Why the product counts under Kubernetes: with `restartPolicy: ExitCode`, training-operator v1.9 gives the
pod itself `restartPolicy: Never`, deletes a failed pod and creates a new one
(pkg/controller.v1/common/pod.go), while `backoffLimit` (PastBackoffLimit, pkg/core/job.go) sums the
container restart counts of the job's running pods: every new pod starts at 0, so it never bounds these.

One incident counts once, however many tasks exit 200 for it: it is counted by the writer's start alone
(under Slurm, by the batch script's one look at the step's outcome). Every failure that stops training
restarts the writer (a MultiWorkerMirrored peer lost, a ps lost, the
chief itself); the evaluator, or one asynchronous worker, restarted alone while training goes on, is not an
incident. The record is keyed by the job's identity, so a resubmitted job starts with a fresh budget.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import List, Mapping, Optional

from estimator_mnist.config import ClusterConfig, TaskId
from estimator_mnist.errors import PermanentFailure

RECORD_FILE = "restart_budget.json"
JOB_ID_ENV = "ESTIMATOR_MNIST_JOB_ID"  # `tfjob` sets it in every pod: the TFJob's namespace/name and submission
# The operator's hosts: <job>-<type>-<index>.<namespace>.svc:<port> (plan/tf_config_source.py).
_OPERATOR_HOST = re.compile(r"^(?P<job>[a-z0-9-]+)-(chief|master|worker|ps|evaluator)-\d+\.(?P<ns>[a-z0-9-]+)\.svc")

ERR_BUDGET = ("task {task}: restart budget used up: job {job} has been restarted {count} times "
              "(restart.max_restarts={limit}): {incidents}; a fault keeps coming back, so this task exits 1 "
              "instead of being started again: read the tasks' logs, fix the cause, then submit the job again "
              "(a new job starts with a fresh budget)")


@dataclass(frozen=True)
class Job:
    """Which job a task belongs to: `key` names it in the record, `source` says where it was read."""

    key: str
    source: str
    starts_count: bool = True  # the writer's starts are the incidents; False where the manager records them


def job_of(environ: Mapping[str, str], tf_config: Optional[dict]) -> Optional[Job]:
    """The job identity under a cluster manager, or None for tasks no manager restarts (launch, by hand)."""
    if environ.get(JOB_ID_ENV):
        return Job(environ[JOB_ID_ENV], JOB_ID_ENV)
    if environ.get("SLURM_JOB_ID"):
        return Job(f"slurm-{environ['SLURM_JOB_ID']}", "SLURM_JOB_ID", starts_count=False)  # supervise/slurm_reruns.py
    if tf_config and tf_config.get("environment") == "cloud":
        for hosts in (tf_config.get("cluster") or {}).values():
            match = _OPERATOR_HOST.match(str(hosts[0])) if hosts else None
            if match:
                return Job(f"tfjob-{match['ns']}-{match['job']}", "the operator's TF_CONFIG")
    return None


def writer_of(cluster: ClusterConfig) -> TaskId:
    """The one task that writes the record: the chief, or worker 0 without one."""
    return cluster.chief_task


def describe(incidents: List[dict]) -> str:
    return ", ".join(f"#{i['number']} at {time.strftime('%H:%M:%S', time.localtime(i['time']))}"
                     f"{' (' + i['what'] + ')' if i.get('what') else ''}" for i in incidents) or "none"


class RestartBudget:
    """The incidents of one job, kept in model_dir/restart_budget.json (or in memory without a model_dir)."""

    def __init__(self, job: Job, max_restarts: int, model_dir: Optional[str] = None, clock=time.time):
        self.job, self.max_restarts, self._clock = job, max_restarts, clock
        self._path = os.path.join(model_dir, RECORD_FILE) if model_dir else None
        self.starts, self.incidents = 0, []
        record = self._read()
        if record.get("job") == job.key:  # another job's record is that job's: this one starts afresh
            self.starts, self.incidents = record.get("starts", 0), record.get("incidents", [])

    def _read(self) -> dict:
        if not self._path:
            return {}
        try:
            with open(self._path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def _write(self) -> None:
        if not self._path:
            return
        os.makedirs(os.path.dirname(self._path), exist_ok=True)
        temporary = f"{self._path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({"job": self.job.key, "source": self.job.source, "max_restarts": self.max_restarts,
                       "starts": self.starts, "incidents": self.incidents}, handle, indent=1)
        os.replace(temporary, self._path)  # readers on other hosts see the old record or the new one, whole

    @property
    def exhausted(self) -> bool:
        return len(self.incidents) > self.max_restarts

    def allows_another(self) -> bool:
        """Whether one more incident would still be within restart.max_restarts."""
        return len(self.incidents) < self.max_restarts

    def record_incident(self, what: str = "", **details) -> dict:
        incident = {"number": len(self.incidents) + 1, "time": self._clock(), "what": what, **details}
        self.incidents.append(incident)
        self._write()
        return incident

    def record_start(self, what: str = "") -> Optional[dict]:
        """The writer task's start: its first for the job is no incident, every later one is."""
        self.starts += 1
        incident = self.record_incident(what) if self.starts > 1 else None
        if incident is None:
            self._write()
        return incident

    def refusal(self, task: TaskId) -> PermanentFailure:
        return PermanentFailure(ERR_BUDGET.format(task=task, job=self.job.key, count=len(self.incidents),
                                                  limit=self.max_restarts, incidents=describe(self.incidents)))


def check_start(task: TaskId, cluster: ClusterConfig, job: Optional[Job], max_restarts: int, model_dir: str,
                resumes_from: Optional[int] = None) -> Optional[dict]:
    """At a task's start under a cluster manager: the writer records its start (where starts count); past the
    budget every task is refused with PermanentFailure. Returns the incident this start is, if any."""
    if job is None:
        return None
    budget = RestartBudget(job, max_restarts, model_dir)
    incident = None
    if task == writer_of(cluster) and job.starts_count:
        incident = budget.record_start(f"resumes from step {resumes_from}" if resumes_from is not None
                                       else "no checkpoint yet")
    if budget.exhausted:
        raise budget.refusal(task)
    return incident
