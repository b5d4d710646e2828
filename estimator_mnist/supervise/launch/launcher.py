"""`estimator-mnist launch`: start every task of a cluster file on this machine and see the run through.

Each task runs `estimator-mnist train --spec FILE`, the TaskSpec the group
wrote for it (group.py), in its own process group, with its own log. The supervisor watches them, the restart
policy decides what a failure costs, and the report says how it went. No
TensorFlow is imported here.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import List, Optional

from estimator_mnist.model_files import checkpoints
from estimator_mnist.storage import is_bucket
from estimator_mnist.config import Config, timeouts
from estimator_mnist.mnist_data.prepare import ERR_NOT_PREPARED, is_prepared
from estimator_mnist.errors import INTERRUPTED_EXIT_CODE, RETRYABLE_EXIT_CODE, UsageError
from estimator_mnist.plan.hosts import check_local, check_ports_free
from estimator_mnist.supervise import private_network
from estimator_mnist.supervise.launch.group import TaskGroup
from estimator_mnist.supervise.launch.monitor import Monitor
from estimator_mnist.supervise.launch.report import (Console, RunRecord, TaskRecord, build_summary, final_line,
                                                     write_summary)
from estimator_mnist.supervise.launch.restarts import Restarts
from estimator_mnist.supervise.launch.supervisor import RunFailed, Supervisor, TaskFailure


def log_dir_of(config: Config, launch_time: float) -> Path:
    """This launch's own log directory: earlier launches keep theirs."""
    return Path(config.run_dir, "logs", time.strftime("%Y%m%d-%H%M%S", time.localtime(launch_time)))


class Launcher:
    def __init__(self, config: Config, cluster_file: str, quiet: bool = False, out=None, command_for=None,
                 network=None, network_line=None, launch_time: Optional[float] = None):
        self.config = config
        self.cluster_file = cluster_file
        self.launch_time = time.time() if launch_time is None else launch_time
        self.console = Console(out, quiet, self.launch_time)
        self.group = TaskGroup(config, log_dir_of(config, self.launch_time), command_for, network, network_line)
        self.monitor = Monitor(config, self.launch_time)
        self.supervisor = Supervisor(config, self.group, self.monitor, self.console)
        self.restarts = Restarts(config, self.launch_time, self.group, self.monitor, self.console)
        self.notes: List[str] = []  # the launcher's own, after the supervisor's

    def record(self, status: str, error: Optional[str]) -> RunRecord:
        """The facts of this launch for run_summary.json, as they stand now."""
        group, monitor = self.group, self.monitor
        return RunRecord(
            config=self.config, cluster_file=self.cluster_file, status=status, error=error,
            launch_time=self.launch_time, ended=time.time(), log_dir=str(group.log_dir),
            final_evaluation=monitor.final_evaluation(), first_step_time=monitor.first_step_time,
            last_step_time=monitor.last_step_time, training_done_time=self.supervisor.training_done_time,
            notes=tuple(self.supervisor.notes + self.notes), restarts=tuple(self.restarts.records),
            network_line=group.network_line, all_pids=tuple(p.pid for p in group.all_processes),
            tasks=tuple(TaskRecord(str(t), p.pid, str(p.log_path), p.exit_code, p.stopped_by_launcher, p.started,
                                   p.ended) for t, p in group.processes.items()))

    def _make_private_dirs(self) -> None:
        # A bucket has no directories to make, nor modes: its access is the bucket's (docs/storage.md).
        local = () if is_bucket(self.config.model_dir) else (Path(self.config.model_dir),)
        for path in (Path(self.config.run_dir), self.group.log_dir, *local):
            existed = path.exists()
            path.mkdir(mode=0o750, parents=True, exist_ok=True)
            mode = path.stat().st_mode & 0o777
            if not existed:
                path.chmod(0o750)
            elif mode & 0o022:
                self.console.say(f"warning: {path} is writable by other users (mode {mode:o}); they could replace "
                                 f"checkpoints or logs: chmod go-w {path}", always=True)

    def _supervise(self) -> None:
        self.supervisor.start(self.config.cluster.tasks())
        while True:
            try:
                return self.supervisor.watch()
            except TaskFailure as failure:
                self.restarts.restart(failure, self.supervisor)

    def run(self) -> int:
        self._make_private_dirs()
        tasks = self.config.cluster.tasks()
        say = self.console.say
        say(f"launching {len(tasks)} tasks from {self.cluster_file}: {', '.join(map(str, tasks))}", always=True)
        say(f"logs: {self.group.log_dir}/<task>.log   model_dir: {self.config.model_dir}", always=True)
        if self.group.network_line:
            say(self.group.network_line, always=True)

        def on_signal(signum, _frame):
            raise KeyboardInterrupt(signal.Signals(signum).name)

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        status, error, code, grace, interrupted = "failed", None, 1, None, False
        try:
            self._supervise()
            status, code = "finished", 0
        except TaskFailure as exc:
            error, code = str(exc), RETRYABLE_EXIT_CODE  # not restarted here (restart.policy: never)
        except RunFailed as exc:
            error = str(exc)
        except KeyboardInterrupt as exc:
            name = exc.args[0] if exc.args else "SIGINT"
            error, code, interrupted = f"interrupted by {name}", INTERRUPTED_EXIT_CODE, True
            if name == "SIGTERM":
                # Preempted: the trainers stop at the same step and the chief saves, within their grace period.
                error, code, grace = "stopped by SIGTERM (preempted); the tasks saved what they could", \
                    RETRYABLE_EXIT_CODE, self.config.training.preemption_grace_secs + timeouts.SIGTERM_BACKSTOP_SECS
        finally:
            self.console.stopped(self.group.stop_all(grace),  # grace None: launcher.grace_secs
                                 "run over" if code == 0 else "stopping the run")
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if interrupted and self._work_saved():
            # A stop that came after the run's work was on disk lost nothing: the exit code says so.
            self.notes.append(f"{error.split(';')[0]} after the run's work was saved")
            status, error, code = "finished", None, 0
        return self._report(status, error, code)

    def _work_saved(self) -> bool:
        """The final checkpoint saved and, with an evaluator, evaluated and exported."""
        step = checkpoints.latest_step(self.config.model_dir)
        return step is not None and step >= self.config.training.max_steps and (
            self.config.cluster.evaluator is None or self.monitor.final_evaluation() is not None)

    def _report(self, status: str, error, code: int) -> int:
        record = self.record(status, error)
        summary = build_summary(record)
        path = write_summary(self.config.run_dir, summary)
        for note in record.notes:
            self.console.say(f"note: {note}", always=True)
        if code != 0:
            failed = [p for p in self.group.processes.values()
                      if p.exit_code not in (0, None) and not p.stopped_by_launcher]
            for p in failed[:1]:
                for line in p.tail():
                    self.console.say(f"  {p.task} | {line}", always=True)
        self.console.say(f"summary: {path}", always=True)
        self.console.say(final_line(summary) if code == 0 else f"failed: {error}", always=True)
        return code


def launch(config: Config, cluster_file: str, quiet: bool = False, out=None, command_for=None) -> int:
    check_local(config.cluster, cluster_file)
    if not is_prepared(config.data_dir):
        raise UsageError(ERR_NOT_PREPARED.format(data_dir=config.data_dir, reason="no prepared dataset found"))
    launch_time = time.time()
    step = checkpoints.latest_step(config.model_dir)
    final = checkpoints.final_evaluation(config.model_dir, config.training.max_steps)
    if step is not None and step >= config.training.max_steps and (
            final is not None or config.cluster.evaluator is None):
        return _nothing_to_do(config, cluster_file, Console(out, quiet, launch_time), step, final)
    network, line = private_network.choose_network(config, cluster_file)
    try:
        if network is None:
            check_ports_free(config.cluster, cluster_file)  # a private namespace has every port free
        launcher = Launcher(config, cluster_file, quiet=quiet, out=out, command_for=command_for, network=network,
                            network_line=line, launch_time=launch_time)
    except BaseException:
        if network is not None:
            network.close()
        raise
    return launcher.run()


def _nothing_to_do(config: Config, cluster_file: str, console: Console, step: int, final) -> int:
    console.say(f"model_dir {config.model_dir} already holds step {step} >= max_steps "
                f"{config.training.max_steps}: nothing to do. Raise training.max_steps to train on.", always=True)
    summary = build_summary(RunRecord(config, cluster_file, "finished", None, console.start, time.time(),
                                      str(log_dir_of(config, console.start)), final_evaluation=final))
    write_summary(config.run_dir, summary)
    console.say(final_line(summary), always=True)
    return 0
