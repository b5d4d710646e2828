"""One array task of a sweep under Slurm: its trial as a single-process srun step, watched. No TensorFlow.

`estimator-mnist sweep ... --array-task` (the script of sweep_script.py) runs
as the batch shell of array task SLURM_ARRAY_TASK_ID and:
- refuses in one line (exit 2) a sweep directory this node does not see, a
  different sweep there, or MNIST not prepared in data_dir on this node;
- exits 0 at once when its trial is finished or stopped (a resubmission);
- plans the trial's TaskSpec here, for the CPUs (SLURM_CPUS_PER_TASK) and
  GPUs Slurm gave it, and runs `train --spec` as one srun step
  (supervise/slurm_trial_step.py): the step's task can be signalled like any
  Slurm task (`scancel --signal=TERM`);
- prints progress lines, and applies the median rule to its own trial against
  the other trials' evaluations in the shared directory (--early-stop median);
- a step that ends with 200 (retryable: a SIGTERM to the step, a crash) runs
  again from the trial's checkpoint; only one that lost steps counts against
  restart.max_restarts (Reruns);
- on SIGTERM to itself (`--signal=B:TERM@N` before the time limit,
  preemption, `scancel --batch --signal=TERM`) it stops the step at a saved
  step and requeues itself with `scontrol requeue`; the trial resumes there.
  A plain `scancel` of the array task sends the same SIGTERM: Slurm's job
  state tells it apart (supervise/slurm_job_state.py), and a cancelled
  trial is recorded "cancelled" and not requeued (the script submitted
  again resumes it);
- records every attempt in its row of sweep.json, under the sweep's lock
  (sweep/shared.py), with sweep.csv and best.yaml rewritten each time; the
  array task that records the last trial prints the sweep's final table.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import List, Mapping, Optional

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import timeouts
from estimator_mnist.errors import RETRYABLE_EXIT_CODE, UsageError
from estimator_mnist.mnist_data.prepare import is_prepared
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.supervise.slurm_job_state import CANCELLED
from estimator_mnist.supervise.slurm_trial_step import TrialStep, gpus_from_slurm, own_cpus
from estimator_mnist.sweep import layout, records, shared, trials
from estimator_mnist.sweep.stopping import median_verdict
from estimator_mnist.sweep.table import SweepConsole

POLL_SECS = 1.0
PROGRESS_SECS = 10.0
MAX_IDLE_RERUNS = 10  # runs of the step in a row that end before the trial's first step (Reruns)
STOP_GRACE_SECS = timeouts.SLURM_TRIAL_STOP_GRACE_SECS  # a condemned trial's TERM is repeated after this, which ends it at once
ERR_NOT_ARRAY = ("SLURM_ARRAY_TASK_ID is not set: --array-task runs as a task of the job array that `estimator-mnist "
                 "sweep --slurm` writes; submit that script with sbatch")
ERR_INDEX = ("array task {index}: the sweep in {dir} has {count} trials (0-{last}); submit the script `sweep --slurm` "
             "writes")
ERR_NOT_SHARED = ("{dir}: node {node} does not see {file} there, written by `sweep --slurm` on the submitting host: "
                  "the sweep directory must be on storage every node shares (NFS, Lustre); give such a --sweep-dir")
ERR_NO_DATA = ("{data_dir}: MNIST is not prepared on node {node}; run `estimator-mnist prepare-data --data-dir "
               "{data_dir}` on every node, or put data_dir on storage every node shares")


class Reruns:
    """Which ends of the step run it again. A 200 (retryable) after which a newer checkpoint exists lost nothing
    and begins the count again; one that lost steps counts against restart.max_restarts, in a row; one before
    the trial took any step (stopped or ended while starting: Slurm's scancel retries its signal for as long as
    slurmctld answers "try again later", and reaches each new step) lost nothing either, and up to
    MAX_IDLE_RERUNS of those in a row run again. Any other code ends the trial (ArrayTask)."""

    def __init__(self, max_restarts: int):
        self.max_restarts, self.failures, self.idle = max_restarts, 0, 0

    def count(self, newer: bool, trained: bool) -> Optional[str]:
        """After a 200: None to run the step again, else why the trial has failed."""
        if newer:
            self.failures = self.idle = 0
            return None
        if not trained:
            self.idle += 1
            return None if self.idle <= MAX_IDLE_RERUNS else \
                f"{self.idle} runs of the step in a row ended before the trial took a step"
        self.failures += 1
        return None if self.failures <= self.max_restarts else \
            f"{self.failures} failures in a row without a newer checkpoint (restart.max_restarts={self.max_restarts})"


def trial_index(plan, environ: Mapping[str, str]) -> int:
    """This array task's trial: SLURM_ARRAY_TASK_ID, checked against the sweep's trials."""
    text = environ.get("SLURM_ARRAY_TASK_ID")
    if not text or not text.isdigit():
        raise UsageError(ERR_NOT_ARRAY)
    count = len(plan.trials)
    if int(text) >= count:
        raise UsageError(ERR_INDEX.format(index=text, dir=plan.sweep_dir, count=count, last=count - 1))
    return int(text)


class ArrayTask:
    def __init__(self, plan, environ: Mapping[str, str], out=None):
        self.plan, self.environ = plan, environ
        self.console = SweepConsole(out, tty=False)
        self.node = environ.get("SLURMD_NODENAME") or "?"
        self.job = environ.get("SLURM_JOB_ID") or "?"
        self.trial: trials.Trial = plan.trials[trial_index(plan, environ)]
        self.step = TrialStep(environ)
        self.preempted = False
        self.others = [t for t in plan.trials if t.name != self.trial.name]
        self.shared = shared.SharedTrial(plan, self.trial)
        self.reruns = Reruns(self.trial.max_restarts)

    def check(self) -> dict:
        """The sweep's record as this node sees it; UsageError for what this node cannot run."""
        sweep_dir = self.plan.sweep_dir
        if records.read_record(sweep_dir) is None:  # missing; a read error is raised, named (records.py)
            raise UsageError(ERR_NOT_SHARED.format(dir=sweep_dir, node=self.node, file=records.SWEEP_FILE))
        record = records.load_or_start(sweep_dir, self.plan.identity, [])  # another sweep: one line, exit 2
        data_dir = self.trial.data["data_dir"]
        if not is_prepared(data_dir):
            raise UsageError(ERR_NO_DATA.format(data_dir=data_dir, node=self.node))
        return record

    def _on_term(self, _signum, _frame) -> None:
        self.preempted = True
        if self.step.running:
            self.step.ask_to_stop()

    # --- the records --------------------------------------------------------------------------------------------
    def _started(self) -> None:
        step = checkpoints.latest_step(str(self.trial.model_dir))
        row = self.shared.attempt_started({"device": f"slurm {self.node}", "node": self.node, "job": self.job}, step)
        self.console.event(f"{self.trial.name} {'resumed from step ' + str(step) if step else 'started'} on "
                           f"{self.node} (job {self.job}, attempt {row['attempts']}): "
                           f"{self.console.values_text(self.trial.values)}")

    def _ended(self, state: str, reason: Optional[str], code: Optional[int]) -> dict:
        outcome = trials.outcome(self.trial)
        outcome.pop("final", None)
        record = self.shared.attempt_ended(state, reason, code, outcome,
                                           checkpoints.latest_step(str(self.trial.model_dir)))
        row = self.shared.row(record)
        trials.write_summary(self.trial, row)
        figures = records.figures_text(row, self.plan.ranked_by)
        self.console.event(f"{self.trial.name} {state}" + (f" {figures}" if figures else "")
                           + (f" ({reason})" if reason else ""))
        return record

    # --- watching -------------------------------------------------------------------------------------------------
    def _verdict(self):
        if self.plan.early_stop != "median":
            return None
        others = {t.name: trials.evaluations(t) for t in self.others}
        return median_verdict(trials.evaluations(self.trial), others, metric=self.plan.ranked_by)

    def _watch(self):
        """Waits for the step; a Verdict when the median rule stopped it, else None."""
        shown = time.monotonic()
        while self.step.wait_once(POLL_SECS):
            verdict = None if self.preempted else self._verdict()
            if verdict is not None:
                self.step.stop(STOP_GRACE_SECS)
                return verdict
            if time.monotonic() - shown >= PROGRESS_SECS:
                shown = time.monotonic()
                show_progress(self.console, self.trial)
        return None

    def _attempt(self) -> tuple:
        """One run of the step: (state or None to run it again, reason, exit code)."""
        self._started()
        before, started = checkpoints.latest_step(str(self.trial.model_dir)), time.time()
        spec = trials.trial_spec(self.trial, own_cpus=own_cpus(self.environ),
                                 gpus_from_manager=gpus_from_slurm(self.environ))
        trials.write_spec(self.trial, spec)  # planned here, on the node, for what Slurm gave this array task
        self.step.start(trials.command(self.trial), self.trial.log_path)
        verdict = self._watch()
        code = self.step.returncode
        if verdict is not None:
            self.shared.update(stopped_at_step=verdict.step)
            return "stopped", verdict.reason, code
        if self.preempted:
            return "preempted", None, code
        if code == 0 and trials.outcome(self.trial).get("final"):
            return "finished", None, code
        if code != RETRYABLE_EXIT_CODE:
            return "failed", failure_reason(self.trial, code), code
        saved = checkpoints.latest_step(str(self.trial.model_dir))
        reason = self.reruns.count(newer=(saved or 0) > (before or 0), trained=self._trained_since(started))
        if reason is not None:
            return "failed", f"{reason}; {failure_reason(self.trial, code)}", code
        return None, f"the step exited {code} (retryable) at step {saved}; it runs again from its checkpoint", code

    def _trained_since(self, started: float) -> bool:
        """Whether the trial's TensorFlow process took a step since `started` (its progress record, on this node)."""
        record = read_progress(self.trial.records_dir).get(str(trials.TRIAL_TASK)) or {}
        return (record.get("first_step_time") or 0) >= started

    def run(self) -> int:
        record = self.check()
        row = self.shared.row(record)
        if row["state"] in records.DONE_STATES:
            self.console.event(f"{self.trial.name} is already {row['state']}: nothing to run")
            return 0
        # A lock error that is not "held by another" (EIO, ESTALE: exit 200) is raised, named (shared.py); a mount
        # without flock (ENOLCK) takes the storage layer's lease, with one line naming the error.
        with shared.trial_lock(self.trial.records, log=self.console.event) as mine:
            if not mine:  # the same sweep submitted twice: never two runs of one trial in one directory
                self.console.event(f"{self.trial.name} is being run by another array task (job "
                                   f"{row.get('job', '?')} on {row.get('node', '?')}): nothing to run here")
                return 0
            record = self._run_trial()
        final_table(self.console, self.plan, record)
        return 1 if self.shared.row(record)["state"] == "failed" else 0

    def _run_trial(self) -> dict:
        trials.write_trial_yaml(self.trial)
        previous = signal.signal(signal.SIGTERM, self._on_term)
        try:
            while True:
                state, reason, code = self._attempt()
                if state == "preempted":
                    raise Requeued(self._requeue(code))
                record = self._ended(state or "interrupted", reason, code)
                if state is not None:
                    return record
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _requeue(self, code: int) -> int:
        step = checkpoints.latest_step(str(self.trial.model_dir))
        word, why = self.step.stop_verdict()
        if word == CANCELLED:
            self._ended("cancelled", f"cancelled (scancel of job {self.job}, {why}) at step {step}: not requeued; "
                                     "submit the sweep's script again to resume it", code)
            return 0
        self._ended("interrupted", f"preempted (SIGTERM to array task, job {self.job}) at step {step}: "
                            "requeued, it resumes from its checkpoint", code)
        done, error = self.step.requeue()
        if not done:
            self.console.event(f"error: scontrol requeue {self.job} failed ({error}); submit the sweep's script "
                               "again to resume")
            return RETRYABLE_EXIT_CODE
        self.console.event(f"{self.trial.name}: job {self.job} requeued; the trial resumes from step {step}")
        return 0


def show_progress(console: SweepConsole, trial) -> None:
    live = trials.live(trial.directory)
    console.event(f"{trial.name} step {live['global_step'] if live['global_step'] is not None else '-'}"
                  f"/{trial.max_steps} validation accuracy {_fmt(live['validation_accuracy'])} test "
                  f"accuracy {_fmt(live['accuracy'])}")


def final_table(console: SweepConsole, plan, record: dict) -> None:
    """Once no trial is left to run: the sweep's final table and its best trial, as a local sweep prints them."""
    if any(r["state"] not in records.DONE_STATES + ("failed",) for r in record["trials"]):
        return
    console.final(record["trials"], plan.ranked_by)
    best = record.get("best")
    if best:
        row = next(r for r in record["trials"] if r["trial"] == best)
        console.event(f"best: {best} ({console.values_text(row['values'])}) {records.figures_text(row, plan.ranked_by)}"
                      f"; its settings: {layout.best_file(plan.sweep_dir)}")


def failure_reason(trial: trials.Trial, code: int) -> str:
    """Why the trial failed: the step's code and the last line of its log."""
    tail = [line for line in _tail(trial.log_path) if line.strip()][-1:]
    return (f"the step exited {code}" if code else "exited 0 without a final evaluation") + \
        (f": {tail[0][:200]}" if tail else "") + f"; see {trial.log_path}"


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _tail(path) -> List[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
    except OSError:
        return []


class Requeued(Exception):
    """The array task was preempted and has asked Slurm to requeue it; args[0] is its exit code."""


def run_array_task(plan, out=None) -> int:
    try:
        return ArrayTask(plan, os.environ, out or sys.stdout).run()
    except Requeued as requeued:
        return requeued.args[0]
