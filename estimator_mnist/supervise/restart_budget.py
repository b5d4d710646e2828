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

What counts (the same rule for all three): a preemption is never an incident. A task that stopped because it
was asked to (SIGTERM, the manager's disruption) with the checkpoint of its stop step saved leaves a mark in
model_dir (preemption_mark.py), and the next count records a preemption instead of an incident.
`restart.max_restarts` bounds the failures in a row without progress: each incident notes whether the
newest checkpoint is newer than the one the previous start restored; one that is begins the count again at
1, one that is not adds 1; past max_restarts the job ends with exit 1. A crash loop (a poisoned checkpoint,
a bad node) so ends after max_restarts restarts, while a multi-day job preempted or failing now and then goes
on. No total cap is needed: the count begins again only after a newer checkpoint, and checkpoints end at
training.max_steps, so restarts cannot go on for ever.

One incident counts once, however many tasks exit 200 for it: it is counted by the writer's start alone
(under Slurm, by the batch script's one look at the step's outcome). Every failure that stops training
restarts the writer (a MultiWorkerMirrored peer lost, a ps lost, the chief itself); the evaluator, or one
asynchronous worker, restarted alone while training goes on, is not an incident. The record is keyed by the
job's identity, so a resubmitted job starts with a fresh budget; it is written with a last good copy and
never silently starts again from zero (model_files/budget_record.py).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional

from estimator_mnist.config import ClusterConfig, TaskId
from estimator_mnist.errors import PermanentFailure
from estimator_mnist.model_files.budget_record import read_record, record_path, write_record
from estimator_mnist.model_files.preemption_mark import take_mark

__all__ = ["Job", "RestartBudget", "budget_line", "check_start", "describe", "job_of", "writer_of"]
JOB_ID_ENV = "ESTIMATOR_MNIST_JOB_ID"  # `tfjob` sets it in every pod: the TFJob's namespace/name and submission
# The operator's hosts: <job>-<type>-<index>.<namespace>.svc:<port> (plan/tf_config_source.py).
_OPERATOR_HOST = re.compile(r"^(?P<job>[a-z0-9-]+)-(chief|master|worker|ps|evaluator)-\d+\.(?P<ns>[a-z0-9-]+)\.svc")

ERR_BUDGET = ("task {task}: restart budget used up: job {job} failed {count} times in a row without a newer "
              "checkpoint (restart.max_restarts={limit}): {incidents}; a fault keeps coming back, so this task exits 1 "
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


def budget_line(event: dict, job: str, max_restarts: int) -> str:
    """What a start (or a rerun) follows, in one line: a preemption, or the restart's place in the count."""
    if "step" in event:
        return f"job {job} resumes after preemption {event['number']} ({event['what']})"
    fresh = "a newer checkpoint than the previous start's, so the count begins again" if event["newer_checkpoint"] \
        else "no newer checkpoint since the previous start"
    return (f"restart {event['in_a_row']}/{max_restarts} of job {job} ({event['what']}; {fresh}; failures in a row "
            f"without progress are bounded by restart.max_restarts)")


def _stderr(line: str) -> None:
    print(f"estimator-mnist: {line}", file=sys.stderr, flush=True)


def _newer(checkpoint: Optional[int], than: Optional[int]) -> bool:
    return checkpoint is not None and (than is None or checkpoint > than)


class RestartBudget:
    """The count of one job, kept in model_dir/restart_budget.json (or in memory without a model_dir).

    `streak`: the failures in a row without a newer checkpoint; `restored`: the checkpoint step the latest
    start restored (None: none)."""

    def __init__(self, job: Job, max_restarts: int, model_dir: Optional[str] = None, clock=time.time,
                 log: Callable[[str], None] = _stderr):
        self.job, self.max_restarts, self._clock = job, max_restarts, clock
        self._path = record_path(model_dir)
        self.starts, self.streak, self.restored = 0, 0, None
        self.incidents: List[dict] = []
        self.preemptions: List[dict] = []
        record = read_record(self._path, log, clock) if self._path else {}
        if record.get("job") == job.key:  # another job's record is that job's: this one starts afresh
            self.starts, self.incidents = record["starts"], record["incidents"]
            self.preemptions, self.restored = record.get("preemptions", []), record.get("restored")
            # A record of the first version counted every incident: all of them, to be safe.
            self.streak = record.get("streak", len(self.incidents))

    def _write(self) -> None:
        if self._path:
            write_record(self._path, {
                "job": self.job.key, "source": self.job.source, "max_restarts": self.max_restarts,
                "rule": "max_restarts bounds the failures in a row without a newer checkpoint; preemptions never count",
                "starts": self.starts, "restored": self.restored, "streak": self.streak,
                "incidents": self.incidents, "preemptions": self.preemptions})

    @property
    def exhausted(self) -> bool:
        return self.streak > self.max_restarts

    def allows_another(self, checkpoint: Optional[int]) -> bool:
        """Whether a failure seen with `checkpoint` the newest would still be within restart.max_restarts."""
        return (1 if _newer(checkpoint, self.restored) else self.streak + 1) <= self.max_restarts

    @property
    def in_a_row(self) -> List[dict]:
        """The incidents of the current streak."""
        return self.incidents[len(self.incidents) - self.streak:] if self.streak else []

    def record_failure(self, what: str, checkpoint: Optional[int], **details) -> dict:
        """A failure, seen when `checkpoint` is the newest checkpoint step: one more in a row, or the first of a
        new count when it is newer than the one the previous start restored."""
        progress = _newer(checkpoint, self.restored)
        self.streak = 1 if progress else self.streak + 1
        incident = {"number": len(self.incidents) + 1, "time": self._clock(), "what": what, "in_a_row": self.streak,
                    "newer_checkpoint": progress, "checkpoint": checkpoint, "previous_start_restored": self.restored,
                    **details}
        self.incidents.append(incident)
        self._write()
        return incident

    def record_preemption(self, mark: dict, checkpoint: Optional[int]) -> dict:
        """A stop asked for, with its step's checkpoint saved: never an incident; after progress, a new count."""
        if _newer(checkpoint, self.restored):
            self.streak = 0
        preemption = {"number": len(self.preemptions) + 1, "time": self._clock(), "step": mark.get("step"),
                      "task": mark.get("task"), "what": f"preempted at step {mark.get('step')}: not counted"}
        self.preemptions.append(preemption)
        self._write()
        return preemption

    def note_start(self, restored: Optional[int]) -> None:
        self.starts += 1
        self.note_restored(restored)

    def note_restored(self, restored: Optional[int]) -> None:
        """The checkpoint step the next start restores: what the next failure is measured against. Slurm's
        reruns note it themselves, so that a step whose writer dies before it counts (or never starts) is
        measured against the same checkpoint again, not one noted before it."""
        self.restored = restored
        self._write()

    def refusal(self, task: TaskId) -> PermanentFailure:
        return PermanentFailure(ERR_BUDGET.format(task=task, job=self.job.key, count=self.streak,
                                                  limit=self.max_restarts, incidents=describe(self.in_a_row)))


def check_start(task: TaskId, cluster: ClusterConfig, job: Optional[Job], max_restarts: int, model_dir: str,
                resumes_from: Optional[int] = None) -> Optional[dict]:
    """At a task's start under a cluster manager: the writer records the preemption or the failure its start
    follows (where starts count), and the checkpoint it restores; past the budget every task is refused with
    PermanentFailure, as when the record and its copy are both unreadable. Returns what this start followed:
    an incident, a preemption ("step" in it), or None."""
    if job is None:
        return None
    budget = RestartBudget(job, max_restarts, model_dir)
    event = None
    if task == writer_of(cluster):
        mark = take_mark(model_dir, resumes_from)
        if mark is not None:
            event = budget.record_preemption(mark, resumes_from)
        elif job.starts_count and budget.starts > 0:
            event = budget.record_failure(f"resumes from step {resumes_from}" if resumes_from is not None
                                          else "no checkpoint yet", resumes_from)
        budget.note_start(resumes_from)
    if budget.exhausted:
        raise budget.refusal(task)
    return event
