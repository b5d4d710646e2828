"""Runs a sweep: P trials at a time, one per device, early stopping, the results, and a clean stop. No TensorFlow.

Trials share nothing: each is its own process group on its own device, so
the scheduler only starts them, watches their records (progress and
eval_results.jsonl), stops the ones the median rule condemns, and hands each
freed device to the next trial. Ctrl-C or SIGTERM stops every trial's
process group (SIGTERM, then SIGKILL after a grace period); a trial stopped
so keeps its checkpoints and the next run of the same sweep resumes it.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from estimator_mnist.config import TaskId, timeouts
from estimator_mnist.model_files import checkpoints
from estimator_mnist.errors import INTERRUPTED_EXIT_CODE, PermanentFailure, RetryableFailure, UsageError
from estimator_mnist.plan.task_spec import spec_environment
from estimator_mnist.supervise.process_group import (TaskProcess, affinity_of, describe_exit, start_pinned,
                                                     stop_processes)
from estimator_mnist.sweep import layout, records, trials
from estimator_mnist.sweep.devices import Device
from estimator_mnist.sweep.stopping import median_verdict
from estimator_mnist.sweep.table import SweepConsole

POLL_SECS = 1.0
EARLY_STOP_GRACE_SECS = timeouts.SWEEP_EARLY_STOP_GRACE_SECS  # a condemned trial's checkpoints are not needed
SAVE_EVERY_SECS = 5.0
CHOOSING = {
    "validation_accuracy": "every trial holds out the last {held_out} training images (data.validation_examples); "
                           "the median rule, the ranking and best.yaml use their accuracy, the test set is only reported",
    "accuracy": "no validation split (data.validation_examples: 0): the median rule, the ranking and best.yaml use "
                "the TEST accuracy, so the best trial's test figure is optimistic",
}


def start_trial(trial: trials.Trial, device: Device, argv: List[str]) -> TaskProcess:
    """Writes the trial's TaskSpec for `device` and starts `argv` (`train --spec`) in its own process group,
    pinned to the device's cores before exec; TF_CONFIG is left out, as for every task started from a spec."""
    gpus = [device.gpu] if device.kind == "gpu" else []  # a CPU trial must see no GPU
    trials.write_spec(trial, trials.trial_spec(trial, gpus=gpus, cpu_set=device.cores or None))
    return start_pinned(TaskId("trial", int(trial.name.split("-")[-1])), argv, spec_environment(os.environ),
                        trial.log_path, device.cores if device.kind == "cpu" else None)


@dataclass(frozen=True)
class SweepPlan:
    sweep_dir: str  # a local path or a gs:// URL (sweep/layout.py joins names, never Path: it collapses gs://)
    base_file: str
    base_data: dict
    trials: List[trials.Trial]
    devices: List[Device]
    early_stop: str
    identity: dict
    thresholds: tuple

    @property
    def ranked_by(self) -> str:
        """What the sweep stops and ranks on: the validation accuracy, or without a split the test one. data.* is
        not swept (space.py), so every trial holds out the same rows, or none."""
        return trials.chooses_by(self.trials[0])


class SweepRunner:
    def __init__(self, plan: SweepPlan, console: SweepConsole,
                 command_for: Callable[[trials.Trial], List[str]] = trials.command, poll_secs: float = POLL_SECS,
                 stop_grace_secs: float = timeouts.SWEEP_STOP_GRACE_SECS):
        self.plan, self.console, self.command_for = plan, console, command_for
        self.poll_secs, self.stop_grace_secs = poll_secs, stop_grace_secs
        self.record = records.load_or_start(plan.sweep_dir, plan.identity, [t.values for t in plan.trials])
        self.record["ranked_by"] = plan.ranked_by
        self.rows: Dict[str, dict] = {row["trial"]: row for row in self.record["trials"]}
        self.trials = {t.name: t for t in plan.trials}
        self.running: Dict[str, tuple] = {}  # name -> (TaskProcess, Device)
        self._saved_at = 0.0

    # --- one trial ---------------------------------------------------------------------------------------
    def _start(self, trial: trials.Trial, device: Device) -> None:
        row = self.rows[trial.name]
        trials.write_trial_yaml(trial)
        process = start_trial(trial, device, self.command_for(trial))
        affinity = affinity_of(process.pid)  # None: it has exited already; its end is recorded at the next poll
        resumed = trials.evaluations(trial) or checkpoints.has_state(trial.model_dir)
        row.update(state="running", device=str(device), affinity=affinity, pid=process.pid, started=time.time(),
                   ended=None, exit_code=None, reason=None, attempts=row.get("attempts", 0) + 1,
                   directory=str(trial.directory), log=str(trial.log_path))
        self.running[trial.name] = (process, device)
        self.console.event(f"{trial.name} {'resumed' if resumed else 'started'} on {device}: "
                           f"{self.console.values_text(trial.values)}")
        self.save(force=True)

    def _ended(self, name: str, process: TaskProcess, state: Optional[str] = None, reason: Optional[str] = None):
        trial, row = self.trials[name], self.rows[name]
        row.update(trials.outcome(trial))
        finished = row.pop("final", False) and process.exit_code == 0
        if state is None:
            state = "finished" if finished else "failed"
            if not finished:
                last = process.tail(1)
                reason = (describe_exit(process.exit_code) if process.exit_code != 0 else
                          "exited 0 without a final evaluation") + (f": {last[0][:200]}" if last else "") + \
                    f"; see {trial.log_path}"
        row.update(state=state, reason=reason, ended=time.time(), exit_code=process.exit_code)
        trials.write_summary(trial, row)
        figures = records.figures_text(row, self.plan.ranked_by)
        self.console.event(f"{name} {state}" + (f" {figures}" if figures else "") + (f" ({reason})" if reason else ""))
        del self.running[name]
        self.save(force=True)

    def _early_stops(self) -> List[Device]:
        histories = {name: trials.evaluations(t) for name, t in self.trials.items()
                     if self.rows[name]["state"] != "pending"}
        freed = []
        for name in list(self.running):
            others = {other: h for other, h in histories.items() if other != name}
            verdict = median_verdict(histories.get(name, []), others, metric=self.plan.ranked_by)
            if verdict is None:
                continue
            process, device = self.running[name]
            stop_processes([process], EARLY_STOP_GRACE_SECS)
            self.rows[name]["stopped_at_step"] = verdict.step  # before _ended writes the trial's summary
            self._ended(name, process, "stopped", verdict.reason)
            freed.append(device)
        return freed

    def _update_live(self) -> None:
        for name in self.running:
            live = {k: v for k, v in trials.live(self.trials[name].records).items() if v is not None}
            self.rows[name].update(live)

    # --- the sweep ---------------------------------------------------------------------------------------
    def save(self, force: bool = False) -> None:
        if force or time.time() - self._saved_at >= SAVE_EVERY_SECS:
            records.save(self.plan.sweep_dir, self.record)
            self._saved_at = time.time()

    def _loop(self, queue: List[trials.Trial]) -> None:
        free = list(self.plan.devices)
        while queue or self.running:
            while queue and free:
                self._start(queue.pop(0), free.pop(0))
            time.sleep(self.poll_secs)
            for name, (process, device) in list(self.running.items()):
                if process.poll():
                    self._ended(name, process)
                    free.append(device)
            if self.plan.early_stop == "median":
                free.extend(self._early_stops())
            free.sort(key=self.plan.devices.index)  # the lowest devices first, for a predictable placement
            self._update_live()
            self.console.table(self.record["trials"], self.running, self.plan.ranked_by)
            self.save()

    def _stop_everything(self, why: str) -> None:
        processes = [process for process, _ in self.running.values()]
        if processes:
            self.console.event(f"{why}: stopping {len(processes)} running trial(s); they keep their checkpoints")
        stop_processes(processes, self.stop_grace_secs)
        for name, (process, _) in list(self.running.items()):
            self._ended(name, process, "interrupted", f"{why}; the same sweep command resumes it")

    def run(self) -> int:
        sweep_dir = self.plan.sweep_dir
        queue = [t for t in self.plan.trials if self.rows[t.name]["state"] not in records.DONE_STATES]
        done = len(self.plan.trials) - len(queue)
        self.console.event(f"sweep of {len(self.plan.trials)} trials in {sweep_dir}: {len(queue)} to run"
                           + (f" ({done} already done)" if done else "") + ", "
                           f"{len(self.plan.devices)} at a time on {', '.join(map(str, self.plan.devices))}")
        self.console.event(CHOOSING[self.plan.ranked_by].format(held_out=self.plan.trials[0].validation_examples))

        def on_signal(signum, _frame):
            raise KeyboardInterrupt(signal.Signals(signum).name)

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        code = 0
        try:
            self._loop(queue)
        except KeyboardInterrupt as exc:
            code = INTERRUPTED_EXIT_CODE
            self._stop_everything(f"interrupted by {exc.args[0] if exc.args else 'SIGINT'}")
        except (RetryableFailure, PermanentFailure, UsageError):
            # The records could not be written (named, records.storage_failure): stop the trials (they keep their
            # checkpoints; the same command resumes them) rather than leave them running unrecorded.
            stop_processes([process for process, _ in self.running.values()], self.stop_grace_secs)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.save(force=True)
        return self._finish(code)

    def _finish(self, code: int) -> int:
        plan = self.plan
        best = records.write_results(plan.sweep_dir, self.record, plan.thresholds, plan.base_data, plan.base_file,
                                     {t.name: t.batch for t in plan.trials})
        self.save(force=True)
        self.console.final(self.record["trials"], self.plan.ranked_by)
        self.console.event(f"results: {layout.sweep_file(plan.sweep_dir)}, {layout.csv_file(plan.sweep_dir)}")
        if best is not None:
            row = self.rows[self.record["best"]]
            self.console.event(f"best: {row['trial']} ({self.console.values_text(row['values'])}) "
                               f"{records.figures_text(row, self.plan.ranked_by)}; its settings: {best}")
        failed = [r for r in self.record["trials"] if r["state"] == "failed"]
        if failed and code == 0:
            self.console.event(f"{len(failed)} trial(s) failed: {', '.join(r['trial'] for r in failed)}; their logs "
                               "are named above and in sweep.json")
            code = 1
        return code
