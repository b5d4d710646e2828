"""What the batch script does once its step stopped with 200 or its batch shell got SIGTERM: Slurm's word decides.

`python -m estimator_mnist.supervise.slurm_job_end TRAIN_ARGS --signalled 0|1 --seen TEXT` runs in the batch
shell before any further step. It asks Slurm what happened (slurm_job_state.py), acts, prints the job's lines
(`estimator-mnist: ...`) and, last, the script's next move (on --move-fd, else as the last line of stdout):
`rerun` (run the step again) or `exit N` (end the batch shell with N):
- nothing of Slurm's (a user's `scancel --signal`, a task failed): the restart budget counts the step
  (slurm_reruns.py): `rerun`, or `exit 1` past the budget;
- a preemption in REQUEUE mode (with or without send_user_signal, the grace time not over), a time limit's
  warning, `scancel --batch`: the step's stop is booked (a preemption, never an incident) and the job requeues
  itself at once with `scontrol requeue`, so that it vacates its nodes within training.preemption_grace_secs
  instead of at the grace time's end; should Slurm have requeued it meanwhile, that is said instead;
- Slurm or an operator requeued the job (Restarts above SLURM_RESTART_COUNT): nothing to do but say which
  event it was; the job resumes by itself;
- a preemption in CANCEL mode: the stop is booked, one line says Slurm preempted and cancelled the job and
  how to resume; the job ends with 200 (retryable: submit it again), never requeued;
- a plain `scancel`: final, exit 0.
With `--early` (the batch shell signalled while the step still stops) it acts only when Slurm has requeued
the job (a node failure: the step may take until KillWait's SIGKILL to end), else prints `wait`.
The summary (run_summary.json) names the event. Whenever the job ends for good, and with `--ended N` after a
step that ended it, the step's records in model_dir/slurm/JOB are removed (plan/slurm_records.py). It
ignores SIGTERM (the requeue it asks for signals the whole batch step). No TensorFlow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Callable, Mapping, Optional

from estimator_mnist.model_files.checkpoints import latest_step
from estimator_mnist.config import timeouts
from estimator_mnist.errors import RETRYABLE_EXIT_CODE, USAGE_EXIT_CODE, PermanentFailure, RetryableFailure, UsageError
from estimator_mnist.model_files import slurm_records
from estimator_mnist.model_files.preemption_mark import take_mark
from estimator_mnist.supervise.restart_budget import RestartBudget, budget_line, job_of
from estimator_mnist.supervise.slurm_job_state import (CANCELLED, PREEMPTED_CANCEL, REQUEUE, RERUN, SLURM_REQUEUED,
                                                       SlurmFacts, job_fields, verdict)
from estimator_mnist.supervise.slurm_reruns import ERR_NO_JOB, book, rerun
from estimator_mnist.supervise.slurm_task_end import step_code
from estimator_mnist.plan.slurm_source import ordered_tasks
from estimator_mnist.supervise.slurm_step import config_of, train_args_parser, write_summary

ERR_REQUEUE = ("scontrol requeue {job} failed ({error}): the job cannot requeue itself (JobRequeue=0 in slurm.conf?); "
               "it stopped at step {step}, saved: submit the script again to resume from it")
RERUN_STEP, WAIT_STEP = -1, -2  # the script's next moves besides an exit
PREEMPTED_LINE = ("Slurm preempted the job and cancels it ({why}): not requeued; it stopped at step {step}, saved: "
                  "to resume from it, submit the same script again ({command}); the job ends with 200 (retryable)")


def say(line: str) -> None:
    print(f"estimator-mnist: {line}", flush=True)


def _event(why: str) -> str:
    return why.split(": ", 1)[1] if ": " in why else why


def requeue_job(job: str) -> Optional[str]:
    """`scontrol requeue JOB`: None when done, else scontrol's error."""
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, check=False,
                                timeout=timeouts.SLURM_SCONTROL_SECS)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    error = result.stderr.strip().removeprefix("scontrol: error: ")
    return None if result.returncode == 0 else (error or f"exit {result.returncode}")


def _book_preemption(config, environ) -> str:
    """The step's stop booked in the restart budget; its line."""
    budget, event, _ = book(config, environ)
    return budget_line(event, job_of(environ, None).key, budget.max_restarts)


def _requeue(config, environ, why: str, seen: str, facts: SlurmFacts, requeue: Callable) -> int:
    job, step = environ["SLURM_JOB_ID"], latest_step(config.model_dir)
    say(f"{seen}; {_event(why)}: {_book_preemption(config, environ)}; requeueing the job, which resumes from step "
        f"{step}")
    error = requeue(job)
    if error is None:
        return 0
    word, again = verdict(job_fields(job), facts)
    if word == SLURM_REQUEUED:  # Slurm was first (the grace time's end): it resumes all the same
        say(f"{_event(again)}: it resumes from step {step}")
        return 0
    say("error: " + ERR_REQUEUE.format(job=job, error=error, step=step))
    return RETRYABLE_EXIT_CODE


def after_stop(config, cluster_file: str, environ: Mapping[str, str], signalled: bool, seen: str,
               fields_of: Callable = job_fields, facts: Optional[SlurmFacts] = None,
               requeue: Callable = requeue_job, early: bool = False) -> int:
    """Acts on Slurm's word; returns the script's next move: RERUN_STEP, WAIT_STEP (`early`: the step still stops
    and Slurm has not requeued the job), else the batch shell's code."""
    if job_of(environ, None) is None:
        say(f"error: {ERR_NO_JOB}")
        return USAGE_EXIT_CODE
    job = environ["SLURM_JOB_ID"]
    facts = facts or SlurmFacts.from_slurm(environ)
    word, why = verdict(fields_of(job), facts, signalled)
    if early and word != SLURM_REQUEUED:
        return WAIT_STEP
    if word == RERUN:
        code, line = rerun(config, environ)
        say(line)
        if code != 0:
            slurm_records.remove_job(config.model_dir, job)
        return RERUN_STEP if code == 0 else code
    step = latest_step(config.model_dir)
    if word == REQUEUE:
        code = _requeue(config, environ, why, seen, facts, requeue)
    elif word == SLURM_REQUEUED:
        mark = take_mark(config.model_dir, step)  # preempted at the grace's end, its stop step saved
        if mark is not None:
            RestartBudget(job_of(environ, None), config.restart.max_restarts, config.model_dir).record_preemption(
                mark, step)
        write_summary(config, cluster_file, environ, event=(word, _event(why)))  # first: SIGKILL may follow
        say(f"{seen}; {_event(why)}: it resumes from step {step}")
        return 0  # its summary written above, once: a second write would book the event twice
    elif word == PREEMPTED_CANCEL:
        _book_preemption(config, environ)
        command = (fields_of(job) or {}).get("Command") or "the batch script"
        say(f"{seen}; " + PREEMPTED_LINE.format(why=_event(why), step=step, command=f"sbatch {command}"))
        code = RETRYABLE_EXIT_CODE
    else:
        say(f"cancelled ({why}): {seen}; not requeued: a cancel is final")
        code = 0
    write_summary(config, cluster_file, environ, cancelled=word == CANCELLED,
                  event=(word, _event(why) + ("; not requeued" if word == PREEMPTED_CANCEL else "")))
    if word in (CANCELLED, PREEMPTED_CANCEL) or code != 0:
        slurm_records.remove_job(config.model_dir, job)
    return code


def step_code_of(args) -> int:
    """The code of the step srun just ended with 0, by its tasks' words (slurm_task_end.step_code): 200 when a task
    said it stopped as asked, else 0; 200 too when the words cannot be read (after_stop then asks Slurm)."""
    try:
        config = config_of(args)
        return step_code(config.model_dir, os.environ["SLURM_JOB_ID"], slurm_records.step_key(os.environ),
                         len(ordered_tasks(config.cluster.tasks())))
    except (UsageError, PermanentFailure, RetryableFailure, OSError, KeyError) as exc:
        print(f"estimator-mnist: the step's tasks' words could not be read ({exc}): taken for a stop, exit "
              f"{RETRYABLE_EXIT_CODE}", file=sys.stderr, flush=True)
        return RETRYABLE_EXIT_CODE


def main(argv=None) -> int:
    parser = train_args_parser("python -m estimator_mnist.supervise.slurm_job_end")
    parser.add_argument("--signalled", type=int, default=0, help="1: the batch shell got SIGTERM")
    parser.add_argument("--seen", default="the step stopped", help="what the script saw, for its line")
    parser.add_argument("--ended", type=int, help="the job ends with this code: remove its records")
    parser.add_argument("--early", action="store_true", help="the step still stops: act only on Slurm's requeue")
    parser.add_argument("--move-fd", type=int, help="the script's next move on this file descriptor, not stdout")
    parser.add_argument("--step-code", action="store_true", help="print the code of a step srun ended with 0")
    args = parser.parse_args(argv)
    if args.step_code:
        print(step_code_of(args), flush=True)
        return 0
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a requeue's or a cancel's SIGTERM: this still says its word
    code = args.ended  # the job's own code stands when only its records could not be removed
    try:
        config = config_of(args)
        if args.ended is not None and os.environ.get("SLURM_JOB_ID"):
            slurm_records.remove_job(config.model_dir, os.environ["SLURM_JOB_ID"])
        elif args.ended is None:
            code = after_stop(config, args.cluster, os.environ, bool(args.signalled), args.seen, early=args.early)
    except UsageError as exc:  # the YAML, edited since the step started
        say(f"error: {exc}")
        code = USAGE_EXIT_CODE if code is None else code
    except (PermanentFailure, RetryableFailure, OSError) as exc:  # model_dir's records refused or not served
        say(f"error: {exc}")
        if code is None:
            code = RETRYABLE_EXIT_CODE if isinstance(exc, RetryableFailure) else 1
    move = {RERUN_STEP: "rerun", WAIT_STEP: "wait"}.get(code, f"exit {code}")
    if args.move_fd is None:
        print(move, flush=True)
    else:
        os.write(args.move_fd, f"{move}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
