"""The batch script's reruns, counted by the job's restart budget (restart_budget.py). No TensorFlow.

The batch shell's slurm_job_end.py calls `rerun` each time the step exited 200 (retryable) and Slurm did nothing
to the job (a user's `scancel --signal`, a failed task), and `book` when the job stops for a preemption or a
time limit. The script keeps no count of its own: this records the incident in model_dir/restart_budget.json,
keyed by SLURM_JOB_ID, the one record of restarts that launch and the cluster managers' tasks use too. The
batch shell sees each step's outcome once, however many of its tasks exited 200, so one incident counts
once; and it counts also a step whose writer task never started (srun failed to start it), which a count
kept by the tasks would miss. A requeue keeps SLURM_JOB_ID and model_dir, so the count carries across it;
a job submitted again starts with a fresh budget.

What failed decides, from each task's own word (slurm_task_end.py): a step in which any task failed by itself
(a non-zero exit it chose, or a death by a signal it was not asked to stop with) is one incident, whatever its
peers did when srun signalled them after it (--kill-on-bad-exit), and even when the chief, so signalled,
saved its stop step and marked a preemption: the mark is dropped. A step whose every task was asked to stop
(`scancel --signal=TERM`, a preemption, a time limit) is none, its stop step saved or not. Incidents count
against restart.max_restarts as failures in a row without a newer checkpoint (restart_budget.py has the rule).
Within the budget `rerun` gives the rerun's line and 0, and the script runs the step again; past it, one
line naming the budget and the incidents counted, and 1, which ends the job with 1.
"""

from __future__ import annotations

import os

from estimator_mnist.model_files.checkpoints import latest_step
from estimator_mnist.errors import USAGE_EXIT_CODE, PermanentFailure
from estimator_mnist.model_files import slurm_records
from estimator_mnist.plan.slurm_source import ordered_tasks
from estimator_mnist.model_files.preemption_mark import take_mark
from estimator_mnist.supervise.restart_budget import RestartBudget, budget_line, describe, job_of
from estimator_mnist.model_files.budget_record import record_path
from estimator_mnist.supervise.slurm_task_end import END_KIND, failed_by_itself

ERR_NO_JOB = "SLURM_JOB_ID is not set: the batch script runs under sbatch, which sets it; submit the script with sbatch"
ERR_SPENT = ("the step exited 200 (retryable) again, and the restart budget is used up: job {job} failed {count} times "
             "in a row without a newer checkpoint (restart.max_restarts={limit}): {incidents}; a fault keeps coming "
             "back, so the job ends with 1: read the task logs in {logs}, fix the cause, then submit the job again "
             "(a new job starts with a fresh budget)")


def failures(config, environ) -> list:
    """What failed by itself in the step that just ended: '<task> (rank r) <why>' for each such task."""
    key, job = slurm_records.step_key(environ), environ["SLURM_JOB_ID"]
    found = []
    for rank, task in enumerate(ordered_tasks(config.cluster.tasks())):
        why = failed_by_itself(slurm_records.read_published(config.model_dir, job, END_KIND, rank), key)
        if why:
            found.append(f"{task} (rank {rank}) {why}")
    return found


def book(config, environ) -> tuple:
    """(budget, what the step's end was booked as, what failed) for the step that just ended: a preemption
    when every task was asked to stop, else one incident. Raises PermanentFailure for unreadable records."""
    job = job_of(environ, None)
    budget = RestartBudget(job, config.restart.max_restarts, config.model_dir, log=lambda line: print(
        f"estimator-mnist: {line}", flush=True))
    latest = latest_step(config.model_dir, strict=True)  # a state the storage refuses: exit 1, not "none"
    mark = take_mark(config.model_dir, latest)  # taken either way: a failure's peers' stop is no preemption
    failed = failures(config, environ)
    if not failed:
        event = budget.record_preemption(mark or {"step": latest, "task": None}, latest)
    else:
        event = budget.record_failure("; ".join(failed), latest,
                                      requeues=int(environ.get("SLURM_RESTART_COUNT") or 0))
    budget.note_restored(latest)  # what the rerun restores, whether or not its writer gets as far as counting
    return budget, event, failed


def rerun(config, environ) -> tuple:
    """(exit code, line) for a step that exited 200: 0 to run it again, 1 past the budget (or with its record
    and the record's copy both unreadable). A step whose every task was asked to stop is no incident."""
    job = job_of(environ, None)
    if job is None:
        return USAGE_EXIT_CODE, f"error: {ERR_NO_JOB}"
    try:
        budget, event, failed = book(config, environ)
    except PermanentFailure as exc:
        return 1, f"error: {exc}"
    if not failed:
        return 0, (f"the step exited 200 (retryable), every task asked to stop: "
                   f"{budget_line(event, job.key, budget.max_restarts)}; running it again from that checkpoint")
    if budget.exhausted:
        logs = os.path.join(config.run_dir, "logs", f"slurm-{environ['SLURM_JOB_ID']}")
        return 1, "error: " + ERR_SPENT.format(job=job.key, count=budget.streak, limit=budget.max_restarts,
                                                incidents=describe(budget.in_a_row), logs=logs)
    return 0, (f"the step exited 200 (retryable): {budget_line(event, job.key, budget.max_restarts)}; running it "
               f"again from the last checkpoint; the record: {record_path(config.model_dir)}")
