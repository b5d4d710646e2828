"""Starts every task of a cluster file on this machine and supervises the group.

Each task runs `estimator-mnist train --task T` in its own process group with
its own log file. The launcher never trusts a task to stop by itself:

- MultiWorkerMirrored workers catch SIGTERM and keep running, and survivors
  of a dead peer retry their session forever, so stopping is SIGTERM to the
  process group, a grace period, then SIGKILL to the group;
- ps tasks block in server.join() forever, so they are stopped once training
  is done;
- a worker has been seen hanging after the chief finished, so once the chief
  exits the others get `finish_timeout_secs` and are then stopped;
- every task gets PR_SET_PDEATHSIG, so even a SIGKILLed launcher leaves no
  task behind.

No TensorFlow is imported here.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from . import checkpoints
from .cluster import TaskId, check_local, check_ports_free, chief_task, cluster_tasks, port_in_use
from .config import Config
from .errors import UsageError
from .cpu import lower_cpu_priority
from . import netns

POLL_SECS = 0.5
PROGRESS_EVERY_SECS = 10.0
PORT_RELEASE_SECS = 60
# Files and directories the run creates: nobody else may replace a checkpoint.
PRIVATE_UMASK = 0o027
ERR_NOT_PREPARED = ("MNIST is not prepared in {data_dir}; run 'estimator-mnist prepare-data --data-dir {data_dir}' "
                    "first (run_local.sh does it for you)")

# Estimator's LoggingTensorHook line, e.g. "loss = 0.0213, step = 1200 (4.512 sec)".
_LOSS_LINE = re.compile(r"loss = (?P<loss>[-+\w.]+), step = (?P<step>\d+)")
_RATE_LINE = re.compile(r"global_step/sec: (?P<rate>[\d.]+)")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL it if the launcher dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the process-group cleanup still applies.


def describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class TaskProcess:
    task: TaskId
    popen: subprocess.Popen
    log_path: Path
    started: float
    exit_code: Optional[int] = None
    ended: Optional[float] = None
    stopped_by_launcher: bool = False
    log_offset: int = 0
    partial_line: str = ""

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def poll(self) -> bool:
        """True when the process has just exited."""
        if self.exit_code is None and self.popen.poll() is not None:
            self.exit_code = self.popen.returncode
            self.ended = time.time()
            return True
        return False

    def new_lines(self) -> List[str]:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self.log_offset)
                chunk = handle.read()
        except OSError:
            return []
        self.log_offset += len(chunk)
        text = self.partial_line + chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self.partial_line = lines.pop()
        return lines

    def tail(self, count=5) -> List[str]:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if line.strip()][-count:]


@dataclass
class Progress:
    step: Optional[int] = None
    loss: Optional[float] = None
    steps_per_sec: Optional[float] = None
    first_step_time: Optional[float] = None
    last_step_time: Optional[float] = None
    last_change: float = field(default_factory=time.time)
    evaluations: List[dict] = field(default_factory=list)

    def update_from_line(self, line: str, now: float) -> None:
        match = _LOSS_LINE.search(line)
        if match:
            step = int(match["step"])
            if self.first_step_time is None:
                self.first_step_time = now
            if self.step is None or step >= self.step:
                self.step = step
                try:
                    self.loss = float(match["loss"])
                except ValueError:
                    self.loss = float("nan")
                self.last_step_time = now
            self.last_change = now
            return
        match = _RATE_LINE.search(line)
        if match:
            self.steps_per_sec = float(match["rate"])
            self.last_change = now

    def latest_eval(self) -> Optional[dict]:
        return self.evaluations[-1] if self.evaluations else None


class RunFailed(Exception):
    pass


class TaskFailure(RunFailed):
    """A failure that starting the tasks again can repair: a task died, or the run stalled."""

    def __init__(self, message: str, task: Optional[TaskId], reason: str):
        super().__init__(message)
        self.task = task
        self.reason = reason


def _stat_fields(pid) -> List[str]:
    """Fields of /proc/PID/stat after the command name: state, ppid, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _process_state(pid: int) -> str:
    fields = _stat_fields(pid)
    return fields[0] if fields else "?"


def living_pids(pids) -> List[int]:
    """The pids still running; a zombie counts as gone."""
    return [pid for pid in pids if _process_state(pid) not in ("?", "Z")]


def descendants(pid: int) -> List[int]:
    """Every process whose ancestry leads to `pid` (from /proc)."""
    children = {}
    for entry in Path("/proc").iterdir():
        fields = _stat_fields(entry.name) if entry.name.isdigit() else []
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


class Launcher:
    def __init__(self, config: Config, cluster_file: str, quiet: bool = False, out=None, command_for=None,
                 network=None, network_line: Optional[str] = None):
        self.config = config
        self.network = network  # a PrivateNetwork the tasks join, or None for the machine's network
        self.network_line = network_line
        self.restarts: List[dict] = []
        self.all_processes: List[TaskProcess] = []
        self.group_started = time.time()
        # Tests swap in stand-in tasks; the supervision logic is the same.
        self.command_for = command_for or self._command
        self.cluster_file = cluster_file
        self.quiet = quiet
        self.out = out or sys.stdout
        self.processes: Dict[TaskId, TaskProcess] = {}
        self.progress = Progress()
        self.launch_time = time.time()
        self.training_done_time: Optional[float] = None
        self.notes: List[str] = []
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_dir = Path(config.run_dir, "logs", self.stamp)
        self.chief = chief_task(config.cluster)
        self._last_print = 0.0
        self._eval_count = 0

    # --- output -------------------------------------------------------------------------------
    def say(self, message: str, always: bool = False) -> None:
        if always or not self.quiet:
            print(message, file=self.out, flush=True)

    def _elapsed(self) -> str:
        return f"[{time.time() - self.launch_time:6.0f}s]"

    # --- processes ----------------------------------------------------------------------------
    def _command(self, task: TaskId) -> List[str]:
        c = self.config
        return [sys.executable, "-m", "estimator_mnist", "train", "--cluster", self.cluster_file,
                "--task", str(task), "--model-dir", c.model_dir, "--data-dir", c.data_dir, "--run-dir", c.run_dir]

    def environment(self, task: TaskId) -> dict:
        env = dict(os.environ)
        env.pop("TF_CONFIG", None)  # each task builds its own from the YAML
        env["PYTHONUNBUFFERED"] = "1"
        if self.config.session.log_device_placement:
            env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the placement lines are INFO-level C++ logs
        else:
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        gpus = self.config.task_settings(task.type, task.index).gpus
        if gpus is not None:
            # "-1" rather than "": an invalid index hides every GPU after it on
            # every CUDA version, while an empty value has been read as "unset".
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus)) if gpus else "-1"
        return env

    def _preexec(self, task: TaskId) -> None:
        """Runs in each task between fork and exec."""
        _die_with_parent()
        os.umask(PRIVATE_UMASK)
        if task.is_evaluator:
            # Before exec, so that even importing TensorFlow does not compete
            # with the trainers' start-up; the task applies it again itself
            # for when it is started by hand.
            lower_cpu_priority(self.config.evaluation.nice)
        if self.network is not None:
            self.network.join()

    def start(self, task: TaskId) -> TaskProcess:
        log_path = self.log_dir / f"{task.type}-{task.index}.log"
        # A restarted task appends to the same log; progress is read from here on.
        offset = log_path.stat().st_size if log_path.exists() else 0
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        with os.fdopen(fd, "ab") as log:
            popen = subprocess.Popen(self.command_for(task), stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, env=self.environment(task),
                                     start_new_session=True, preexec_fn=functools.partial(self._preexec, task))
        process = TaskProcess(task=task, popen=popen, log_path=log_path, started=time.time(), log_offset=offset)
        self.processes[task] = process
        self.all_processes.append(process)
        return process

    def stop(self, processes: List[TaskProcess], reason: str) -> None:
        """SIGTERM each process group, wait the grace period, then SIGKILL the groups."""
        targets = [p for p in processes if p.running]
        for p in targets:
            p.stopped_by_launcher = True
            self._signal_group(p, signal.SIGTERM)
        deadline = time.time() + self.config.launcher.grace_secs
        while time.time() < deadline and any(p.running for p in targets):
            time.sleep(0.1)
            for p in targets:
                p.poll()
        for p in targets:
            # Also for those that exited: their group may still hold children.
            self._signal_group(p, signal.SIGKILL)
        for p in targets:
            if p.running:
                try:
                    p.popen.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                p.poll()
        if targets:
            names = ", ".join(str(p.task) for p in targets)
            self.say(f"{self._elapsed()} stopped {names} ({reason})")

    @staticmethod
    def _signal_group(process: TaskProcess, sig) -> None:
        try:
            os.killpg(process.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop_all(self, reason: str) -> None:
        self.stop(list(self.processes.values()), reason)
        for p in self.processes.values():
            self._signal_group(p, signal.SIGKILL)  # stragglers of already-exited leaders

    # --- monitoring ---------------------------------------------------------------------------
    def _read_progress(self, now: float) -> None:
        for p in self.processes.values():
            if p.task.is_evaluator or p.task.type == "ps":
                p.new_lines()
                continue
            for line in p.new_lines():
                if p.task == self.chief:
                    self.progress.update_from_line(line, now)
        evaluations = checkpoints.read_eval_results(self.config.model_dir)
        if len(evaluations) != self._eval_count:
            self._eval_count = len(evaluations)
            self.progress.evaluations = evaluations
            self.progress.last_change = now
            latest = evaluations[-1]
            self.say(f"{self._elapsed()} evaluation of step {latest['global_step']}: "
                     f"accuracy {latest['accuracy']:.4f}, loss {latest['loss']:.4f}")

    def _print_progress(self, now: float) -> None:
        if now - self._last_print < PROGRESS_EVERY_SECS:
            return
        self._last_print = now
        pr = self.progress
        if self.training_done_time is not None:
            waiting = ", ".join(str(p.task) for p in self.processes.values() if p.running)
            self.say(f"{self._elapsed()} training finished; waiting for {waiting} to finish")
            return
        if pr.step is None:
            self.say(f"{self._elapsed()} starting: {len([p for p in self.processes.values() if p.running])} tasks up, "
                     f"waiting for the first training step")
            return
        rate = f", {pr.steps_per_sec:.1f} steps/s" if pr.steps_per_sec else ""
        ev = pr.latest_eval()
        eval_text = f", last evaluation: step {ev['global_step']} accuracy {ev['accuracy']:.4f}" if ev else ""
        loss = f", loss {pr.loss:.4f}" if pr.loss is not None else ""
        self.say(f"{self._elapsed()} step {pr.step}/{self.config.training.max_steps}{loss}{rate}{eval_text}")

    def _starting(self) -> bool:
        """Until the (re)started group's first step, starting up is bounded by the session timeout too."""
        last = self.progress.last_step_time
        return last is None or last < self.group_started

    def _stall_limit(self) -> float:
        limit = self.config.launcher.stall_timeout_secs
        return limit + (self.config.training.session_creation_timeout_secs if self._starting() else 0)

    def _stall_extra(self) -> str:
        return " + training.session_creation_timeout_secs, while starting" if self._starting() else ""

    def final_evaluation(self) -> Optional[dict]:
        for record in reversed(self.progress.evaluations or checkpoints.read_eval_results(self.config.model_dir)):
            if record["global_step"] >= self.config.training.max_steps:
                return record
        return None

    def supervise(self) -> None:
        """Returns when the run succeeded; raises RunFailed otherwise."""
        cfg = self.config.launcher
        has_evaluator = self.config.cluster.evaluator is not None
        while True:
            now = time.time()
            self._read_progress(now)
            for p in self.processes.values():
                if not p.poll():
                    continue
                self.progress.last_change = now
                ok = p.exit_code == 0
                after_training = self.training_done_time is not None and not p.task.is_evaluator
                if not ok and not p.stopped_by_launcher:
                    if after_training:
                        self.notes.append(f"{p.task} exited with {describe_exit(p.exit_code)} after training had finished")
                        continue
                    raise TaskFailure(f"task {p.task} failed ({describe_exit(p.exit_code)}); its log: {p.log_path}",
                                      p.task, describe_exit(p.exit_code))
                self.say(f"{self._elapsed()} {p.task} exited ({describe_exit(p.exit_code)})")
                if p.task == self.chief and ok:
                    self._on_training_done(now)

            if self.training_done_time is not None:
                others = [p for p in self.processes.values() if p.running and not p.task.is_evaluator]
                if others and now - self.training_done_time > cfg.finish_timeout_secs:
                    self.notes.append(f"{', '.join(str(p.task) for p in others)} still running "
                                      f"{cfg.finish_timeout_secs} s after the chief finished; stopped")
                    self.stop(others, "still running after training finished")
                evaluator = self.processes.get(TaskId("evaluator", 0))
                if evaluator is None or not evaluator.running:
                    if not any(p.running for p in self.processes.values()):
                        if has_evaluator and self.final_evaluation() is None:
                            raise TaskFailure("the evaluator exited without evaluating the final checkpoint; "
                                              f"its log: {evaluator.log_path}", evaluator.task,
                                              "exited before the final evaluation")
                        return
                elif now - self.training_done_time > cfg.eval_timeout_secs:
                    raise RunFailed(f"the evaluator did not evaluate the final checkpoint within "
                                    f"launcher.eval_timeout_secs={cfg.eval_timeout_secs} s; its log: {evaluator.log_path}")
            elif now - self.progress.last_change > self._stall_limit():
                stopped = [str(p.task) for p in self.processes.values() if p.running and _process_state(p.popen.pid) == "T"]
                culprit = f"; stopped by a signal: {', '.join(stopped)}" if stopped else ""
                raise TaskFailure(f"no task made progress for {self._stall_limit():.0f} s (launcher.stall_timeout_secs"
                                  f"{self._stall_extra()}; last step: {self.progress.step}{culprit}); logs in "
                                  f"{self.log_dir}", None, f"stalled for {self._stall_limit():.0f} s{culprit}")
            self._print_progress(now)
            time.sleep(POLL_SECS)

    def _on_training_done(self, now: float) -> None:
        self.training_done_time = now
        step = checkpoints.latest_step(self.config.model_dir)
        if step is None or step < self.config.training.max_steps:
            raise RunFailed(f"the chief {self.chief} exited 0 but the latest checkpoint is at step {step}, "
                            f"below max_steps {self.config.training.max_steps}; its log: {self.processes[self.chief].log_path}")
        self.say(f"{self._elapsed()} training finished at step {step}")
        ps = [p for p in self.processes.values() if p.task.type == "ps"]
        self.stop(ps, "parameter servers never exit by themselves")

    # --- restarts -------------------------------------------------------------------------------
    def _restart(self, failure: TaskFailure) -> None:
        """Stops what failed (the whole training group: MultiWorkerMirrored cannot go on with a
        member missing) and starts it again; Estimator resumes from the latest checkpoint."""
        policy = self.config.restart
        if policy.policy != "on_failure" or len(self.restarts) >= policy.max_restarts:
            if policy.policy == "on_failure":
                raise RunFailed(f"{failure}; gave up after {len(self.restarts)} restarts "
                                f"(restart.max_restarts={policy.max_restarts})")
            raise failure
        now = time.time()
        if failure.task is not None and failure.task.is_evaluator:
            group = [self.processes[failure.task]]  # training goes on; only the evaluator starts again
        else:
            group = [p for p in self.processes.values() if not p.task.is_evaluator]
        step_at_failure = self.progress.step
        self.stop(group, f"restarting after: {failure.task or 'the run'} {failure.reason}")
        restored = checkpoints.latest_step(self.config.model_dir)
        evaluator_only = failure.task is not None and failure.task.is_evaluator
        redo = (step_at_failure - (restored or 0)) if step_at_failure is not None and not evaluator_only else 0
        record = {
            "number": len(self.restarts) + 1,
            "time": now,
            "seconds_since_launch": now - self.launch_time,
            "failed_task": str(failure.task) if failure.task else None,
            "reason": failure.reason,
            "error": str(failure),
            "step_at_failure": step_at_failure,
            "restored_checkpoint_step": restored,
            "steps_redone": max(0, redo),
            "restarted_tasks": [str(p.task) for p in group],
        }
        self.restarts.append(record)
        self.say(f"{self._elapsed()} restart {record['number']}/{policy.max_restarts}: "
                 f"{record['failed_task'] or 'the run'} {failure.reason} at step {step_at_failure}; starting "
                 f"{', '.join(record['restarted_tasks'])} again from checkpoint {restored} "
                 f"({record['steps_redone']} steps to redo)", always=True)
        self._wait_for_ports([p.task for p in group])
        time.sleep(policy.backoff_secs)
        if not evaluator_only:
            self.training_done_time = None
            self.progress.step = restored
        if not evaluator_only:
            self.group_started = time.time()
        for p in group:
            self.start(p.task)
        self.progress.last_change = time.time()

    def _wait_for_ports(self, tasks: List[TaskId]) -> None:
        """A restarted task must be able to listen on its port again."""
        if self.network is not None:
            return  # the stopped tasks' sockets died with them, inside the private namespace
        ports = [a.port for r, i, a in self.config.cluster.training_tasks() if TaskId(r, i) in tasks]
        deadline = time.time() + PORT_RELEASE_SECS
        busy = [port for port in ports if port_in_use(port)]
        while busy and time.time() < deadline:
            time.sleep(0.5)
            busy = [port for port in ports if port_in_use(port)]
        if busy:
            raise RunFailed(f"ports {busy} were still in use {PORT_RELEASE_SECS} s after the tasks that held them "
                            "were stopped; cannot restart")

    # --- summary --------------------------------------------------------------------------------
    def summary(self, status: str, error: Optional[str]) -> dict:
        final = self.final_evaluation()
        end = time.time()
        pr = self.progress
        return {
            "status": status,
            "error": error,
            "cluster_file": self.cluster_file,
            "strategy": self.config.strategy.name,
            "max_steps": self.config.training.max_steps,
            "global_step": checkpoints.latest_step(self.config.model_dir),
            "accuracy": final["accuracy"] if final else None,
            "export": final["export"] if final else None,
            "evaluations": checkpoints.read_eval_results(self.config.model_dir),
            "model_dir": self.config.model_dir,
            "log_dir": str(self.log_dir),
            "launch_time": self.launch_time,
            "seconds_to_first_step": (pr.first_step_time - self.launch_time) if pr.first_step_time else None,
            "seconds_to_last_step": (pr.last_step_time - self.launch_time) if pr.last_step_time else None,
            "seconds_to_training_done": (self.training_done_time - self.launch_time) if self.training_done_time else None,
            "seconds_to_exit": end - self.launch_time,
            "notes": self.notes,
            "restart_policy": self.config.restart.policy,
            "restarts": self.restarts,
            "network": self.network_line,
            "all_pids": [p.popen.pid for p in self.all_processes],
            "tasks": {
                str(t): {"pid": p.popen.pid, "log": str(p.log_path), "exit": p.exit_code,
                         "exit_reason": describe_exit(p.exit_code), "stopped_by_launcher": p.stopped_by_launcher,
                         "seconds": (p.ended or end) - p.started}
                for t, p in self.processes.items()
            },
        }

    def write_summary(self, summary: dict) -> Path:
        path = Path(self.config.run_dir, "run_summary.json")
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # never a half-written summary
        return path

    # --- the whole run --------------------------------------------------------------------------
    def _make_private_dirs(self) -> None:
        for path in (Path(self.config.run_dir), self.log_dir, Path(self.config.model_dir)):
            existed = path.exists()
            path.mkdir(mode=0o750, parents=True, exist_ok=True)
            mode = path.stat().st_mode & 0o777
            if not existed:
                path.chmod(0o750)
            elif mode & 0o022:
                self.say(f"warning: {path} is writable by other users (mode {mode:o}); they could replace "
                         f"checkpoints or logs: chmod go-w {path}", always=True)

    def run(self) -> int:
        config = self.config
        self._make_private_dirs()
        tasks = cluster_tasks(config.cluster)
        self.say(f"launching {len(tasks)} tasks from {self.cluster_file}: {', '.join(map(str, tasks))}", always=True)
        self.say(f"logs: {self.log_dir}/<task>.log   model_dir: {config.model_dir}", always=True)
        if self.network_line:
            self.say(self.network_line, always=True)
        previous = {}

        def on_signal(signum, _frame):
            raise KeyboardInterrupt(signal.Signals(signum).name)

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, on_signal)
        status, error, code = "failed", None, 1
        try:
            for task in tasks:
                self.start(task)
            while True:
                try:
                    self.supervise()
                    break
                except TaskFailure as failure:
                    self._restart(failure)
            status, code = "finished", 0
        except RunFailed as exc:
            error = str(exc)
        except KeyboardInterrupt as exc:
            error = f"interrupted by {exc.args[0] if exc.args else 'SIGINT'}"
            code = 130
        finally:
            self.stop_all("run over" if code == 0 else "stopping the run")
            if self.network is not None:
                self.network.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        summary = self.summary(status, error)
        path = self.write_summary(summary)
        for note in self.notes:
            self.say(f"note: {note}", always=True)
        if code != 0:
            failed = [p for p in self.processes.values() if p.exit_code not in (0, None) and not p.stopped_by_launcher]
            for p in failed[:1]:
                for line in p.tail():
                    self.say(f"  {p.task} | {line}", always=True)
            self.say(f"summary: {path}", always=True)
            self.say(f"failed: {error}", always=True)
            return code
        self.say(f"summary: {path}", always=True)
        self.say(final_line(summary), always=True)
        return 0


def final_line(summary: dict) -> str:
    accuracy = f"{summary['accuracy']:.4f}" if summary.get("accuracy") is not None else "none"
    return f"finished: accuracy={accuracy} global_step={summary['global_step']} export={summary.get('export') or 'none'}"


def data_is_prepared(data_dir: str) -> bool:
    # The same test TFDS applies, without importing it: a finished version
    # directory has dataset_info.json (TFDS renames the directory into place).
    root = Path(data_dir, "mnist")
    return any(p.name[0].isdigit() and "incomplete" not in p.name and (p / "dataset_info.json").is_file()
               for p in root.glob("*")) if root.is_dir() else False


def launch(config: Config, cluster_file: str, quiet: bool = False, out=None, command_for=None) -> int:
    check_local(config.cluster, cluster_file)
    if not data_is_prepared(config.data_dir):
        raise UsageError(ERR_NOT_PREPARED.format(data_dir=config.data_dir))
    launcher = Launcher(config, cluster_file, quiet=quiet, out=out, command_for=command_for)
    step = checkpoints.latest_step(config.model_dir)
    if step is not None and step >= config.training.max_steps:
        final = launcher.final_evaluation()
        if final is not None or config.cluster.evaluator is None:
            launcher.say(f"model_dir {config.model_dir} already holds step {step} >= max_steps "
                         f"{config.training.max_steps}: nothing to do. Raise training.max_steps to train on.", always=True)
            summary = launcher.summary("finished", None)
            launcher.write_summary(summary)
            launcher.say(final_line(summary), always=True)
            return 0
    network, line = netns.choose_network(config, cluster_file)
    if network is None:
        check_ports_free(config.cluster, cluster_file)  # a private namespace has every port free
    launcher.network, launcher.network_line = network, line
    return launcher.run()
