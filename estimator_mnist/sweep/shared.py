"""A sweep's records written by many processes on many nodes: each change under one lock. No TensorFlow.

Under Slurm every array task updates its own trial's row of sweep.json, and
rewrites sweep.csv and best.yaml from the whole record, while other array
tasks on other nodes do the same. Each update holds the storage layer's lock
(storage/lock.py) on <sweep_dir>/sweep.lock for its read-modify-write, so no
update is lost: flock(2), which NFS v4 and Lustre mounted with `flock` honour
across nodes (Lustre's `localflock` does not: docs/slurm_sweeps.md), else
(a mount without a lock manager: ENOLCK, ENOSYS, EOPNOTSUPP; a bucket) the
layer's lease. Every file is replaced atomically (records.py), so readers
(`sweep-status`, `ensemble`) never take a lock and never see half a file.
The local scheduler is the only writer of its sweep and needs no lock.

A lock that cannot be taken for any other reason (EIO, ESTALE, a denied
bucket) is a storage failure, named in one line (records.storage_failure:
exit 200 when transient), never "held by another".
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, Dict, Iterator, Optional

from estimator_mnist import storage
from estimator_mnist.storage import lock
from estimator_mnist.sweep import layout, records


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _exclusive(path: str, doing: str, blocking: bool, log, scheme_dir=None) -> Iterator[bool]:
    """lock.exclusive, its own storage errors (taking or releasing it) named; the block's errors pass unchanged."""
    inside = False
    try:
        with lock.exclusive(path, log or _warn, blocking=blocking, scheme_dir=scheme_dir) as taken:
            inside = True
            yield taken
            inside = False
    except OSError as exc:
        if inside:
            raise
        raise records.storage_failure(exc, path, doing) from None


@contextlib.contextmanager
def locked(sweep_dir, log=None) -> Iterator[None]:
    """Holds the sweep's lock; waits for any other holder, on this node or another."""
    with _exclusive(layout.lock_file(sweep_dir), "taking the sweep's lock", True, log):
        yield


@contextlib.contextmanager
def trial_lock(directory, log=None) -> Iterator[bool]:
    """Holds <trial>/trial.lock while a Slurm array task runs the trial: True, or False when another process (on any
    node) holds it already. Released when its holder ends, however it ends (flock: with the process; the lease:
    its heartbeat stops). Any other failure to take it is raised, named."""
    # One lock scheme for the whole sweep (storage/lock.py): the trial's lock follows the sweep directory's record.
    with _exclusive(layout.trial_lock_file(directory), "taking the trial's lock", False, log,
                    scheme_dir=storage.parent(str(directory))) as mine:
        yield mine


def start_or_resume(sweep_dir, identity: dict, trial_values, ranked_by: str) -> dict:
    """The sweep's record, created or checked against `identity` (a UsageError for another sweep), saved."""
    with locked(sweep_dir):
        record = records.load_or_start(sweep_dir, identity, trial_values)
        record["ranked_by"] = ranked_by
        records.save(sweep_dir, record)
        return record


def update_row(sweep_dir, name: str, change: Callable[[dict], None],
               results: Optional[Callable[[dict], Optional[str]]] = None) -> dict:
    """Applies `change` to trial `name`'s row of the record on disk, then `results` (sweep.csv, best.yaml) to the
    whole record, and saves it; all under the lock. Returns the record as saved."""
    with locked(sweep_dir):
        record = records.read_sweep(sweep_dir)
        rows: Dict[str, dict] = {row["trial"]: row for row in record["trials"]}
        change(rows[name])
        if results is not None:
            results(record)
        records.save(sweep_dir, record)
        return record


class SharedTrial:
    """One trial's row in a shared sweep.json: each attempt's start and end, with sweep.csv and best.yaml
    rewritten from the whole record every time (the array task that runs the trial is its only writer)."""

    def __init__(self, plan, trial):
        self.plan, self.trial = plan, trial

    def _results(self, record: dict) -> Optional[str]:
        plan = self.plan
        return records.write_results(plan.sweep_dir, record, plan.thresholds, plan.base_data, plan.base_file,
                                     {t.name: t.batch for t in plan.trials})

    def update(self, **changes) -> dict:
        """Sets `changes` on the row; returns the row as saved."""
        record = update_row(self.plan.sweep_dir, self.trial.name, lambda row: row.update(changes), self._results)
        return self.row(record)

    def row(self, record: dict) -> dict:
        return next(r for r in record["trials"] if r["trial"] == self.trial.name)

    def attempt_started(self, where: dict, from_step: Optional[int]) -> dict:
        """Counts an attempt; `where` (node, job) goes to the row and to the attempt's entry in its history."""
        def change(row):
            attempt = row.get("attempts", 0) + 1
            row.update(state="running", attempts=attempt, started=time.time(), ended=None, exit_code=None,
                       reason=None, directory=str(self.trial.directory), log=str(self.trial.log_path), **where)
            row.setdefault("history", []).append({"attempt": attempt, **where, "from_step": from_step,
                                                  "started": row["started"]})

        return self.row(update_row(self.plan.sweep_dir, self.trial.name, change, self._results))

    def attempt_ended(self, state: str, reason: Optional[str], code: Optional[int], outcome: dict,
                      to_step: Optional[int]) -> dict:
        """The attempt's end: the row's state and figures, and the end of its history entry. Returns the record."""
        def change(row):
            row.update(state=state, reason=reason, ended=time.time(), exit_code=code, **outcome)
            entries = row.setdefault("history", [{}])
            entries[-1].update(ended=row["ended"], exit_code=code, state=state, reason=reason, to_step=to_step)

        return update_row(self.plan.sweep_dir, self.trial.name, change, self._results)
