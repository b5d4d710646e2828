"""The progress lines of a Slurm job, as `launch` prints them: run by the batch script beside the step.

`python -m estimator_mnist.supervise.slurm_step TRAIN_ARGS --pid PID` reads the
progress records and evaluations the tasks write to the shared run_dir and
model_dir (launch's Monitor and Console), and prints to the job's output
until the step (srun, PID) ends; then it writes run_summary.json there, for
`estimator-mnist summary`. The tasks run on other nodes, so a record
counts once it was written after this step began, not by the tasks' PIDs.
It outlives the SIGTERM a cancel sends to every process of the batch step (it ignores it) and ends with
the step. Once Slurm's event is known (a cancel, a preemption, a requeue: slurm_job_end.py), the summary is
written again naming it, with each task's end as it said it (slurm_task_end.py).
No TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import load_config
from estimator_mnist.storage import read_json, write_json
from estimator_mnist.errors import PermanentFailure
from estimator_mnist.model_files import slurm_records
from estimator_mnist.plan.slurm_source import ordered_tasks
from estimator_mnist.supervise.launch.monitor import Monitor
from estimator_mnist.supervise.launch.report import SUMMARY_FILE, Console
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.supervise.restart_budget import RestartBudget, job_of
from estimator_mnist.supervise.slurm_task_end import END_KIND

POLL_SECS = 1.0


class StepMonitor(Monitor):
    """launch's view of progress, for tasks started by srun on any node: records written since `now` count."""

    def __init__(self, config, now: float):
        super().__init__(config, now)
        self._since = now
        self._records_dir = config.records_dir

    def _current_records(self) -> Dict[str, dict]:
        return {name: r for name, r in read_progress(self._records_dir).items() if (r.get("time") or 0) >= self._since}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def task_ends(config, environ, cancelled: bool) -> Dict[str, str]:
    """Each task's end in the step that ended last, as the task said it."""
    key, job, ends = slurm_records.step_key(environ), environ.get("SLURM_JOB_ID"), {}
    for rank, task in enumerate(ordered_tasks(config.cluster.tasks())):
        record = slurm_records.read_published(config.model_dir, job, END_KIND, rank) if job else None
        if record is None or record.get("step") != key:
            ends[str(task)] = "no word (killed, or never started)"
        elif record.get("signal"):
            ends[str(task)] = (f"{'cancelled' if cancelled else 'asked to stop'} ({record['signal']}), exit "
                               f"{record.get('code')}")
        else:
            ends[str(task)] = f"exit {record.get('code')}"
    return ends


def write_summary(config, cluster_file: str, environ=None, cancelled: bool = False,
                  event: Optional[Tuple[str, str]] = None) -> None:
    """run_summary.json in the shared run_dir, so that `estimator-mnist summary RUN_DIR` finds the run; its
    restarts are the job's reruns so far, from the restart budget's record (reruns.py). `event`: what Slurm did
    to the job (slurm_job_state.py's word, and its status text) once its step stopped."""
    environ = os.environ if environ is None else environ
    job = job_of(environ, None)
    try:
        reruns = RestartBudget(job, config.restart.max_restarts, config.model_dir).incidents if job else []
    except PermanentFailure:
        reruns = []  # both copies unreadable: the reruns' own line says so, and how to reset
    final = checkpoints.final_of(checkpoints.read_eval_results(config.model_dir), config.training.max_steps)
    step = checkpoints.latest_step(config.model_dir)
    status = "finished" if final else f"stopped at step {step}"
    if cancelled:
        status = f"cancelled (scancel) at step {step}: not requeued"
    elif event is not None:
        status = f"{event[1]} at step {step}"
    path = Path(config.run_dir, SUMMARY_FILE)
    before = (read_json(path) or {}).get("slurm") or {}  # the job's earlier events, kept across its requeues
    events = before.get("events", []) if before.get("job_id") == environ.get("SLURM_JOB_ID") else []
    requeues = int(environ.get("SLURM_RESTART_COUNT", 0))
    if event is not None:
        events = [*events, {"event": event[0], "what": event[1], "step": step, "requeues": requeues}]
    elif events and events[-1]["requeues"] == requeues and not final:  # the step's watcher, after the event
        event = (events[-1]["event"], events[-1]["what"])
        status = f"{event[1]} at step {events[-1]['step']}"
    write_json(path, {
        "status": status, "cluster_file": cluster_file, "tasks": task_ends(config, environ, cancelled),
        "strategy": config.strategy.name, "max_steps": config.training.max_steps, "global_step": step,
        "accuracy": final["accuracy"] if final else None, "export": final["export"] if final else None,
        "run_dir": config.run_dir, "model_dir": config.model_dir, "restart_policy": "slurm batch script",
        "restarts": [{"number": i["number"], "time": i["time"], "reason": "the step exited 200 (retryable)"}
                     for i in reruns],
        "slurm": {"job_id": environ.get("SLURM_JOB_ID"), "requeues": requeues,
                  "cancelled": cancelled, "event": event[0] if event else None, "events": events},
    }, indent=2)


def watch(config, pid: int, out=None, poll: float = POLL_SECS) -> None:
    """Prints progress and evaluations until process `pid` ends."""
    now = time.time()
    monitor, console = StepMonitor(config, now), Console(out or sys.stdout, tty=False, start=now)
    tasks = len(config.cluster.tasks())
    while _alive(pid):
        now = time.time()
        for record in monitor.update(now):
            console.evaluation(record)
        if monitor.step is not None and monitor.step >= config.training.max_steps:
            console.waiting(["the final evaluation and the export"] if config.cluster.evaluator else ["the tasks"],
                            now)
        else:
            console.progress(monitor, config.training.max_steps, tasks, now)
        time.sleep(poll)
    for record in monitor.update(time.time()):
        console.evaluation(record)
    if monitor.step is not None:
        console.timed(f"the step ended at training step {monitor.step}")


def train_args_parser(prog: str) -> argparse.ArgumentParser:
    """A parser of the script's TRAIN_ARGS: the YAML, its --set overrides and the paths, as `train` gets them."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    for flag in ("--model-dir", "--run-dir", "--data-dir"):
        parser.add_argument(flag)
    return parser


def config_of(args):
    return load_config(args.cluster, args.overrides, model_dir=args.model_dir, run_dir=args.run_dir,
                       data_dir=args.data_dir)


def main(argv=None) -> int:
    parser = train_args_parser("python -m estimator_mnist.supervise.slurm_step")
    parser.add_argument("--pid", type=int, required=True)
    args = parser.parse_args(argv)
    config = config_of(args)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a cancel's SIGTERM: the summary is still written
    watch(config, args.pid)
    write_summary(config, args.cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
