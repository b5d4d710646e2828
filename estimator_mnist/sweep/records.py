"""What a sweep leaves behind: sweep.json (every trial, read back to resume), sweep.csv and best.yaml. No TensorFlow.

sweep.json records the sweep's identity (the base YAML's settings, the
parameters as given, --samples and --seed); a later run with the same
identity resumes it, and a different sweep pointed at the same directory is
refused, so that no trial's directory is ever reused for other values.

Trials are ranked, and best.yaml and `ensemble --top K` chosen, on the
figure sweep.json's `ranked_by` names: `validation_accuracy` when the trials
hold out a validation split (the sweep's default), else the test set's
`accuracy`, which every output then says. The test accuracy is reported, not
chosen on.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
from typing import Dict, List, Optional

from estimator_mnist import storage
from estimator_mnist.errors import PermanentFailure, RetryableFailure, UsageError
from estimator_mnist.storage.errors import is_transient, problem_text
from estimator_mnist.storage.urls import check_url
from estimator_mnist.sweep import layout
from estimator_mnist.sweep.layout import BEST_FILE, CSV_FILE, SWEEP_FILE, TRIAL_FILE  # noqa: F401  (the readers')
from estimator_mnist.sweep.space import as_overrides
from estimator_mnist.sweep.stopping import NAMES

DONE_STATES = ("finished", "stopped")  # a re-run skips these; any other state is (re)started, from its checkpoints
ERR_OTHER_SWEEP = ("{dir}: holds a different sweep (its {what} differ from this command's); give another "
                   "--sweep-dir, or the same --cluster settings, --param, --samples and --seed to resume it")
ERR_NOT_A_SWEEP = "{dir}: no {file} there; give the --sweep-dir of a sweep (estimator-mnist sweep)"
RANKED_BY = NAMES  # how each figure a sweep can rank by is named to the user
# A storage error of the sweep's records: the storage layer names its own (storage/errors.py); what reaches here
# raw (a lock's fcntl, shared.py) is told apart by the layer's one list: a transient one (an NFS server that did
# not answer, a stale handle) exits 200 so that a restart tries again; any other exits 1.
ERR_TRANSIENT = ("{path}: {doing} failed ({problem}, {code}); the storage failed for now: exiting with 200 "
                 "(retryable) so that a restart (Slurm's requeue, the same command again) tries again")
ERR_STORAGE = ("{path}: {doing} failed ({problem}, {code}); check that this node can read and write the sweep "
               "directory (its permissions, free space, the mount), then run the same command again")
ERR_TOP = ("--top {top}: the sweep in {dir} has {count} finished trial(s){which}; use --top {count} or less"
           "{hint}")


def identity(base_data: dict, param_texts, samples: Optional[int], seed: int) -> dict:
    """What makes two sweeps the same sweep: JSON-normalised, so that it compares equal after a round trip."""
    return json.loads(json.dumps({"base": base_data, "params": list(param_texts), "samples": samples, "seed": seed},
                                 default=str))


def location(sweep_dir: str) -> str:
    """A --sweep-dir as the commands use it: a gs://BUCKET/PATH URL, or a local path made absolute; any other
    scheme is refused in one line naming what works (never Path() on a URL: it collapses gs:// to gs:/)."""
    return check_url(str(sweep_dir), "estimator-mnist", "--sweep-dir") or os.path.abspath(sweep_dir)


def trial_name(index: int) -> str:
    return f"trial-{index:03d}"


def storage_failure(exc: OSError, path, doing: str) -> Exception:
    """What a storage error of the sweep's records is, in one line: the storage layer's own errors as they are
    (denied exit 1, unavailable exit 200, no bucket exit 2), a disk's transient errno a RetryableFailure (exit
    200), any other a PermanentFailure (exit 1)."""
    if isinstance(exc, (PermanentFailure, RetryableFailure, UsageError)):
        return exc
    code = errno.errorcode.get(exc.errno, "no errno") if exc.errno else "no errno"
    text = ERR_TRANSIENT if is_transient(exc) else ERR_STORAGE
    failure = RetryableFailure if is_transient(exc) else PermanentFailure
    return failure(text.format(path=path, doing=doing, problem=problem_text(exc), code=code))


def read_record(sweep_dir) -> Optional[dict]:
    """sweep.json, or None when there is none (or it is no JSON object); a read error is raised as what it is."""
    path = layout.sweep_file(sweep_dir)
    try:
        return storage.read_json(path)
    except OSError as exc:
        raise storage_failure(exc, path, "reading the sweep's record") from None


def load_or_start(sweep_dir, ident: dict, trial_values: List[dict]) -> dict:
    """The sweep's record: the one on disk (same identity), or a new one with every trial pending."""
    existing = read_record(sweep_dir)
    if existing is not None:
        differ = [k for k in ("base", "params", "samples", "seed") if existing.get("identity", {}).get(k) != ident[k]]
        if differ:
            names = {"base": "base settings", "params": "--param", "samples": "--samples", "seed": "--seed"}
            raise UsageError(ERR_OTHER_SWEEP.format(dir=sweep_dir, what=", ".join(names[k] for k in differ)))
        return existing
    trials = [{"trial": trial_name(i), "values": json.loads(json.dumps(values, default=str)), "state": "pending",
               "attempts": 0} for i, values in enumerate(trial_values)]
    return {"identity": ident, "trials": trials}


def _replace(path: str, data: str, what: str) -> None:
    """`path` replaced whole (a unique temporary name, then a rename; an upload on a bucket): a reader on any node
    sees the old file or the new one, never part of one."""
    try:
        storage.write_atomic(path, data)
    except OSError as exc:
        raise storage_failure(exc, path, f"writing {what}") from None


def save(sweep_dir, record: dict) -> None:
    _replace(layout.sweep_file(sweep_dir), json.dumps(record, indent=1) + "\n", "the sweep's record")


def read_sweep(sweep_dir) -> dict:
    """The record of an existing sweep (sweep-status, ensemble): a bucket that does not exist, or no credentials,
    is one line and exit 2 (storage.check_bucket), not "no sweep.json there"."""
    storage.check_bucket(sweep_dir)
    record = read_record(sweep_dir)
    if record is None:
        raise UsageError(ERR_NOT_A_SWEEP.format(dir=sweep_dir, file=SWEEP_FILE))
    return record


def ranked_by(record: dict) -> str:
    """The figure the sweep ranks on; a sweep.json from before validation splits was ranked on the test set."""
    return record.get("ranked_by", "accuracy")


def best_trials(record: dict) -> List[dict]:
    """Finished trials, highest final figure of `ranked_by` first (the earlier trial on a tie)."""
    key = ranked_by(record)
    done = [t for t in record["trials"] if t["state"] == "finished" and t.get(key) is not None]
    return sorted(done, key=lambda t: -t[key])


def top_trials(record: dict, sweep_dir, top: int) -> List[dict]:
    """The `top` best finished trials, or a one-line UsageError when there are fewer."""
    ranked = best_trials(record)
    if top > len(ranked):
        others = [t for t in record["trials"] if t["state"] != "finished"]
        states = sorted({t["state"] for t in others})
        which = f" (and {len(others)} {'/'.join(states)})" if others else ""
        hint = "; finish the sweep first (run the same sweep command again)" if others else ""
        raise UsageError(ERR_TOP.format(top=top, dir=sweep_dir, count=len(ranked), which=which, hint=hint))
    return ranked[:top]


def csv_text(record: dict, thresholds) -> str:
    """A row per trial; `rank` orders the finished ones by the figure named in `ranked_by` (1: best.yaml's)."""
    keys = list(dict.fromkeys(k for t in record["trials"] for k in t["values"]))
    columns = ["trial", "state", *keys, "validation_accuracy", "test_accuracy", "rank", "ranked_by", "global_step",
               *[f"seconds_to_{t:g}" for t in thresholds], "images_per_sec", "device", "reason", "log"]
    rank = {t["trial"]: i + 1 for i, t in enumerate(best_trials(record))}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for t in record["trials"]:
        reached = t.get("seconds_to") or {}
        writer.writerow([t["trial"], t["state"], *[json.dumps(t["values"].get(k)) for k in keys],
                         t.get("validation_accuracy"), t.get("accuracy"), rank.get(t["trial"]), ranked_by(record),
                         t.get("global_step"), *[reached.get(f"{x:g}") for x in thresholds],
                         t.get("images_per_sec"), t.get("device"), t.get("reason"), t.get("log")])
    return out.getvalue()


def figures_text(row: dict, key: str) -> str:
    """'validation accuracy 0.9812 (chose), test accuracy 0.9790': both figures, and which one chose."""
    parts = [f"{RANKED_BY[k]} {row[k]:.4f}" + (" (chose)" if k == key else "")
             for k in ("validation_accuracy", "accuracy") if row.get(k) is not None]
    return ", ".join(parts)


def best_yaml(base_data: dict, base_file: str, best: dict, sweep_dir, batch: int, key: str) -> str:
    """The base YAML with the best trial's values, its cluster kept, and a comment on what one process tuned."""
    import yaml  # Imported here so `--help` stays instant.

    from estimator_mnist.config import apply_overrides

    data = apply_overrides(base_data, as_overrides(best["values"]))
    values = " ".join(as_overrides(best["values"]))
    header = [f"# {base_file} with the best values of the sweep in {sweep_dir}:",
              f"#   {best['trial']}: {values} (final {figures_text(best, key)})",
              *(["# Chosen on the trials' validation split, held out of their training; the test accuracy is "
                 "reported, not chosen on.",
                 "# This file trains on data.validation_examples as set below (none set: all 60,000 images)."]
                if key == "validation_accuracy" else
                ["# Chosen on the TEST accuracy: the trials held out no validation split "
                 "(data.validation_examples: 0), so that figure is optimistic."]),
              "# These values were tuned in ONE process (one trainer, global batch "
              f"{batch}). With more trainers the global batch grows",
              "# with them (batch_size_per_replica x trainers): a learning rate tuned here may need scaling.",
              ""]
    return "\n".join(header) + yaml.safe_dump(data, sort_keys=False)


def write_results(sweep_dir, record: dict, thresholds, base_data: dict, base_file: str,
                  batch_of: Dict[str, int]) -> Optional[str]:
    """sweep.csv, and best.yaml when a trial finished, each replaced whole; returns best.yaml's path or None."""
    _replace(layout.csv_file(sweep_dir), csv_text(record, thresholds), CSV_FILE)
    ranked = best_trials(record)
    if not ranked:
        return None
    record["best"] = ranked[0]["trial"]
    path = layout.best_file(sweep_dir)
    _replace(path, best_yaml(base_data, base_file, ranked[0], sweep_dir, batch_of[ranked[0]["trial"]],
                             ranked_by(record)), BEST_FILE)
    return path
