"""What the launcher tells the user: console lines while it runs, run_summary.json and the final line."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import Config
from estimator_mnist.model_files.layout import RUN_SUMMARY_FILE as SUMMARY_FILE
from estimator_mnist.storage import write_json
from estimator_mnist.supervise.launch.monitor import Monitor
from estimator_mnist.supervise.process_group import describe_exit

PROGRESS_EVERY_SECS = 5.0  # once training runs: the step, images/s, loss, latest evaluation, time left
WAITING_EVERY_SECS = 10.0  # before the first step and after the last: a line that something is still under way
CLEAR_LINE = "\r\x1b[K"


class Console:
    """Prints the launcher's own lines; `quiet` keeps only the start, failures and the final line.

    On a terminal the progress is one line rewritten in place; elsewhere (CI,
    a log file) each progress report is a line of its own.
    """

    def __init__(self, out=None, quiet: bool = False, start: Optional[float] = None, tty: Optional[bool] = None):
        self.out = out or sys.stdout
        self.quiet = quiet
        self.start = start or time.time()
        self.tty = tty if tty is not None else bool(getattr(self.out, "isatty", lambda: False)())
        self._last_progress = 0.0
        self._status_shown = False

    def say(self, message: str, always: bool = False) -> None:
        if always or not self.quiet:
            prefix = CLEAR_LINE if self._status_shown else ""
            self._status_shown = False
            print(prefix + message, file=self.out, flush=True)

    def timed(self, message: str, always: bool = False) -> None:
        self.say(f"[{time.time() - self.start:6.0f}s] {message}", always)

    def status(self, message: str) -> None:
        """A progress report: rewrites the terminal's last line, or prints a line."""
        if self.quiet:
            return
        if not self.tty:
            self.timed(message)
            return
        self.out.write(f"{CLEAR_LINE}[{time.time() - self.start:6.0f}s] {message}")
        self.out.flush()
        self._status_shown = True

    def stopped(self, processes, reason: str) -> None:
        """The line for tasks the launcher had to stop, when there were any."""
        if processes:
            self.timed(f"stopped {', '.join(str(p.task) for p in processes)} ({reason})")

    def evaluation(self, record: dict) -> None:
        self.timed(f"evaluation of step {record['global_step']}: test accuracy {record['accuracy']:.4f}, "
                   f"loss {record['loss']:.4f}{validation_text(record, ', ')}")

    def _due(self, now: float, every: float) -> bool:
        if now - self._last_progress < every:
            return False
        self._last_progress = now
        return True

    def progress(self, monitor: Monitor, max_steps: int, running: int, now: float) -> None:
        """A progress report every PROGRESS_EVERY_SECS once training runs (every WAITING_EVERY_SECS before)."""
        if monitor.step is None:
            if self._due(now, WAITING_EVERY_SECS):
                self.status(f"starting: {running} tasks up, waiting for the first training step")
            return
        if not self._due(now, PROGRESS_EVERY_SECS):
            return
        parts = [f"step {monitor.step}/{max_steps}"]
        parts.append(f"{monitor.images_per_sec:,.0f} images/s" if monitor.images_per_sec else "images/s: measuring")
        if monitor.loss is not None:
            parts.append(f"loss {monitor.loss:.4f}")
        latest = monitor.latest_eval()
        if latest:
            parts.append(f"last evaluation: step {latest['global_step']} test accuracy {latest['accuracy']:.4f}"
                         + validation_text(latest, " ", loss=False))
        left = monitor.seconds_left(now)
        parts.append(f"about {max(0.0, left):.0f} s left" if left is not None else "time left: measuring")
        self.status(", ".join(parts))

    def waiting(self, names, now: float) -> None:
        if self._due(now, WAITING_EVERY_SECS):
            self.status(f"training finished; waiting for {', '.join(names)} to finish")


def validation_text(record: dict, separator: str, loss: bool = True) -> str:
    """The validation split's figures of an evaluation record, after `separator`; "" without a split."""
    if record.get("validation_accuracy") is None:
        return ""
    text = f"{separator}validation accuracy {record['validation_accuracy']:.4f}"
    return text + (f", loss {record['validation_loss']:.4f}" if loss else "")


def _since(moment: Optional[float], start: float) -> Optional[float]:
    return moment - start if moment else None


@dataclass(frozen=True)
class TaskRecord:
    """One task's (latest) process, as run_summary.json reports it."""

    name: str
    pid: int
    log: str
    exit_code: Optional[int]
    stopped_by_launcher: bool
    started: float
    ended: Optional[float]


@dataclass(frozen=True)
class RunRecord:
    """What run_summary.json says of one launch beyond what model_dir holds, gathered once it ends."""

    config: Config
    cluster_file: str
    status: str
    error: Optional[str]
    launch_time: float
    ended: float
    log_dir: str
    final_evaluation: Optional[dict] = None  # of a checkpoint at or past max_steps
    first_step_time: Optional[float] = None
    last_step_time: Optional[float] = None
    training_done_time: Optional[float] = None
    notes: Tuple[str, ...] = ()
    restarts: Tuple[dict, ...] = ()
    network_line: Optional[str] = None
    all_pids: Tuple[int, ...] = ()  # every process started, restarted ones included
    tasks: Tuple[TaskRecord, ...] = ()


def build_summary(run: RunRecord) -> dict:
    """run_summary.json: the outcome, every evaluation, timings from the trainers' own records, each task."""
    config, start, final = run.config, run.launch_time, run.final_evaluation
    return {
        "status": run.status, "error": run.error, "cluster_file": run.cluster_file,
        "strategy": config.strategy.name, "max_steps": config.training.max_steps,
        "global_step": checkpoints.latest_step(config.model_dir),
        "accuracy": final["accuracy"] if final else None, "export": final["export"] if final else None,
        "validation_accuracy": final.get("validation_accuracy") if final else None,
        "evaluations": checkpoints.read_eval_results(config.model_dir),
        "run_dir": config.run_dir, "model_dir": config.model_dir, "log_dir": run.log_dir, "launch_time": start,
        "seconds_to_first_step": _since(run.first_step_time, start),
        "seconds_to_last_step": _since(run.last_step_time, start),
        "seconds_to_training_done": _since(run.training_done_time, start),
        "seconds_to_exit": run.ended - start, "notes": list(run.notes),
        "restart_policy": config.restart.policy, "restarts": list(run.restarts),
        "network": run.network_line, "all_pids": list(run.all_pids),
        "tasks": {t.name: {"pid": t.pid, "log": t.log, "exit": t.exit_code, "exit_reason": describe_exit(t.exit_code),
                           "stopped_by_launcher": t.stopped_by_launcher, "seconds": (t.ended or run.ended) - t.started}
                  for t in run.tasks},
    }


def write_summary(run_dir: str, summary: dict) -> Path:
    return write_json(Path(run_dir, SUMMARY_FILE), summary, indent=2)


def final_line(summary: dict) -> str:
    """`accuracy=` is the test set's, as in eval_results.jsonl; a validation split adds `validation_accuracy=`."""
    accuracy = f"{summary['accuracy']:.4f}" if summary.get("accuracy") is not None else "none"
    held_out = summary.get("validation_accuracy")
    return (f"finished: accuracy={accuracy} global_step={summary['global_step']} "
            f"export={summary.get('export') or 'none'}"
            + (f" validation_accuracy={held_out:.4f}" if held_out is not None else ""))
