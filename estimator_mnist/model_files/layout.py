"""Where each thing lives in a model_dir: every file and folder the product, TensorFlow or Serving reads there,
named once. No TensorFlow; on a disk and on a bucket alike (storage.join names both).

    model_dir/
      checkpoint                          TensorFlow's checkpoint state (text protobuf)        state_file
      model.ckpt-<step>.index|.meta|.data-*   the checkpoints (TensorFlow writes them)          INDEX_SUFFIX
      eval_results.jsonl                  one line per evaluation (tf_task/evaluator.py)       eval_results_file
      export/<name>/<timestamp>/saved_model.pb   finished exports, Serving's layout            export_base, exports.py
      export/<name>/temp-<timestamp>/     an export being written, renamed when finished       temporary_export
      preempted.json                      a preemption's mark (preemption_mark.py)             mark_file
      restart_budget.json                 the restart budget's count (budget_record.py)        budget_file
      restart_budget.json.last-good       its last good copy                                   LAST_GOOD
      restart_budget.json.unreadable-*    a corrupt record kept aside                          ASIDE
      slurm/<job id>/<kind>-rank-<rank>.json   a Slurm step's port and end records             slurm_record_file
      .checkpoint-check.lock              the checkpoint check's lock (model_files/lock.py)    lock_file
      .checkpoint-check.lock.lease, .lock-scheme.json   the lock's lease and the directory's lock scheme,
                                          named by the storage layer's lock (storage/lock.py), as in any
                                          directory it locks
      damaged/<prefix>-<n>/               damaged checkpoints moved aside                      damaged_dir
      progress/<type>-<index>.json        progress records, when model_dir is where they go    progress_file
      tmp_<type>_<index>/                 a non-chief's summaries TensorFlow writes (removed)  summary_copy_dir

A run_dir's model_dir is <run_dir>/model unless the YAML names one (default_model_dir); its run_summary.json
names it (RUN_SUMMARY_FILE, written by supervise/launch/report.py). Progress records go to
Config.records_dir: run_dir, or model_dir when that is a bucket (records_dir); the names below it are the same.
TensorBoard's events files are TensorFlow's own and not named here.

Changing a name here changes where a new run looks: a model_dir written before would no longer resume.
tests/e2e/test_model_dir_upgrade.py trains into one with an older version of the product and resumes it.
"""

from __future__ import annotations

import os

from estimator_mnist import storage

STATE_FILE = "checkpoint"
INDEX_SUFFIX = ".index"
EVAL_RESULTS_FILE = "eval_results.jsonl"
EXPORT_DIR = "export"
SAVED_MODEL_FILE = "saved_model.pb"  # what marks an export finished (exports.py)
TEMPORARY_EXPORT = "temp-"
MARK_FILE = "preempted.json"
BUDGET_FILE = "restart_budget.json"
LAST_GOOD = ".last-good"
ASIDE = ".unreadable-"
SLURM_DIR = "slurm"
LOCK_FILE = ".checkpoint-check.lock"
DAMAGED_DIR = "damaged"
PROGRESS_DIR = "progress"
SUMMARY_COPY = "tmp_{type}_{index}"
DEFAULT_MODEL_DIR = "model"  # a run_dir's model_dir when the YAML names none
RUN_SUMMARY_FILE = "run_summary.json"  # a run_dir's: where `predict` and `summary` find its model_dir


def under(name: str):
    """The path of `name` below a directory, on a disk and a bucket alike: one such function per name below."""
    def path(directory: str) -> str:
        return storage.join(str(directory), name)

    path.__doc__ = f"<directory>/{name}"
    return path


default_model_dir, run_summary_file = under(DEFAULT_MODEL_DIR), under(RUN_SUMMARY_FILE)  # of a run_dir
state_file, eval_results_file = under(STATE_FILE), under(EVAL_RESULTS_FILE)
export_root = under(EXPORT_DIR)  # the folder of every export base (one per exporter: `latest`, `best`)
saved_model_file = under(SAVED_MODEL_FILE)  # of an export
mark_file, budget_file, lock_file = under(MARK_FILE), under(BUDGET_FILE), under(LOCK_FILE)
damaged_dir = under(DAMAGED_DIR)
progress_dir = under(PROGRESS_DIR)  # of Config.records_dir


def records_in_model_dir(model_dir: str) -> bool:
    """Whether the records other tasks read while a job runs (progress) live in model_dir: when it is a bucket,
    whose machines share nothing else (docs/storage.md); else in run_dir."""
    return storage.is_bucket(model_dir)


def records_dir(model_dir: str, run_dir: str) -> str:
    return model_dir if records_in_model_dir(model_dir) else run_dir


def entry(model_dir: str, name: str) -> str:
    """A name a listing of model_dir gave (a checkpoint's file), as a path."""
    return storage.join(model_dir, name)


def in_model_dir(model_dir: str, path: str) -> str:
    """A path the state file names: relative to model_dir (as TensorFlow's Saver writes them) or absolute."""
    return path if storage.is_bucket(path) or os.path.isabs(path) else storage.join(model_dir, path)


def export_base(model_dir: str, name: str) -> str:
    return storage.join(export_root(model_dir), name)


def export_dir(base: str, stamp) -> str:
    """The export of timestamp `stamp` under an export base (Serving loads the numerically greatest)."""
    return storage.join(base, str(stamp))


def temporary_export(base: str, stamp) -> str:
    """Where the export of timestamp `stamp` is written before it is renamed (tf_model/export.py)."""
    return storage.join(base, f"{TEMPORARY_EXPORT}{stamp}")


def model_dir_of_export(export: str) -> str:
    """<model_dir> of <model_dir>/export/<name>/<timestamp>."""
    return storage.parent(storage.parent(storage.parent(export.rstrip("/"))))


def slurm_job_dir(model_dir: str, job_id) -> str:
    return storage.join(model_dir, SLURM_DIR, str(job_id))


def slurm_record_file(model_dir: str, job_id, kind: str, rank: int) -> str:
    return storage.join(slurm_job_dir(model_dir, job_id), f"{kind}-rank-{rank}.json")


def progress_file(records_dir: str, task) -> str:
    """<records_dir>/progress/<type>-<index>.json of a TaskId."""
    return storage.join(progress_dir(records_dir), f"{task.type}-{task.index}.json")


def summary_copy_dir(model_dir: str, task) -> str:
    return storage.join(model_dir, SUMMARY_COPY.format(type=task.type, index=task.index))
