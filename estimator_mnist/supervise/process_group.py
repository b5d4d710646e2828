"""Starting processes in their own process groups, stopping them for sure, and asking psutil about them: for
`launch`'s tasks, `train`'s TensorFlow child, a sweep's trials and the namespace helper. No TensorFlow.

The launcher never trusts a task to stop by itself: MultiWorkerMirrored
workers catch SIGTERM and keep running, and survivors of a dead peer retry
their session for ever. So stopping is SIGTERM to the process group, a grace
period, then SIGKILL to the group; and every task gets PR_SET_PDEATHSIG, so
even a SIGKILLed launcher leaves no task behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence

import psutil

from estimator_mnist.config import TaskId, timeouts

SPEC_SUFFIX = ".spec.json"  # a task's TaskSpec file (spec_file)

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


def die_with_parent() -> None:
    """Runs in a child between fork and exec: SIGKILL it if its parent dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the process-group cleanup still applies.


def stopped_by_signal(pid: int, with_children: bool = True) -> bool:
    """The process (or, with_children, any of its descendants) is stopped by a signal: state T (SIGSTOP, a
    debugger). False for a process that is gone."""
    try:
        process = psutil.Process(pid)
        family = [process, *process.children(recursive=True)] if with_children else [process]
        return any(p.status() == psutil.STATUS_STOPPED for p in family)
    except psutil.Error:
        return False


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

    @property
    def pid(self) -> int:
        return self.popen.pid

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

    def is_stopped_by_signal(self) -> bool:
        """SIGSTOPped (state T), the task or its TensorFlow child: alive but making no progress."""
        return stopped_by_signal(self.pid)

    def tail(self, count=5) -> List[str]:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if line.strip()][-count:]


def start_task(task: TaskId, command: List[str], env: dict, log_path: Path,
               preexec: Callable[[], None]) -> TaskProcess:
    """Starts one task in a new session (its own process group), appending to its log."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    with os.fdopen(fd, "ab") as log:
        popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True, preexec_fn=preexec)
    return TaskProcess(task=task, popen=popen, log_path=log_path, started=time.time())


def start_pinned(task: TaskId, command: List[str], env: dict, log_path: Path,
                 cores: Optional[Sequence[int]] = None) -> TaskProcess:
    """start_task, dying with this process, and pinned to `cores` before exec when given: the process's own
    children (a task's TensorFlow process) and all their threads inherit them."""
    def preexec():
        die_with_parent()
        if cores is not None:
            os.sched_setaffinity(0, cores)

    return start_task(task, command, env, log_path, preexec)


def affinity_of(pid: int) -> Optional[List[int]]:
    """The CPUs process `pid` may run on, or None once it has exited."""
    try:
        return sorted(psutil.Process(pid).cpu_affinity())
    except psutil.Error:
        return None


def signal_group(process: TaskProcess, sig) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_processes(processes: Iterable[TaskProcess], grace_secs: float) -> List[TaskProcess]:
    """SIGTERM each running process group, wait the grace period, then SIGKILL the groups. Returns those stopped."""
    targets = [p for p in processes if p.running]
    for p in targets:
        p.stopped_by_launcher = True
        signal_group(p, signal.SIGTERM)
    deadline = time.time() + grace_secs
    while time.time() < deadline and any(p.running for p in targets):
        time.sleep(0.1)
        for p in targets:
            p.poll()
    for p in targets:
        signal_group(p, signal.SIGKILL)  # also for those that exited: their group may still hold children
    for p in targets:
        if p.running:
            try:
                p.popen.wait(timeout=timeouts.GROUP_GONE_SECS)
            except subprocess.TimeoutExpired:
                pass
            p.poll()
    wait_for_groups([p.pid for p in targets])
    return targets


def group_members(pgids) -> List[int]:
    """The living processes (zombies excluded) of these process groups, wherever their parents are now."""
    wanted, members = set(pgids), []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) in wanted:
                members.append(proc.pid)
        except OSError:  # gone since the listing
            continue
    return living_pids(members)


def wait_for_groups(pgids, timeout: float = timeouts.GROUP_GONE_SECS) -> List[int]:
    """Waits until the SIGKILLed groups are gone; returns the pids still there after `timeout`.

    A leader is reaped as soon as it dies, but its children, killed with it,
    belong to init from then on and may take a moment more to exit: a
    TensorFlow process SIGKILLed with gigabytes mapped was seen alive 0.5 s
    after the launcher had returned (test_killing_a_worker_stops_the_whole_run).
    """
    deadline = time.time() + timeout
    while True:
        left = group_members(pgids)
        if not left or time.time() >= deadline:
            return left
        time.sleep(0.05)


def living_pids(pids) -> List[int]:
    """The pids still running; a zombie counts as gone."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


def spec_file(log_dir: Path, task: TaskId) -> Path:
    """Where `launch` writes a task's TaskSpec: beside its log, `<type>-<index>.spec.json` (so the process table
    names each task: tests/process_table.py reads the task back from the name)."""
    return log_dir / f"{task.type}-{task.index}{SPEC_SUFFIX}"
