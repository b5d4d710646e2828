"""Where each thing lives in a sweep directory: every file and folder named once. No TensorFlow.

    sweep_dir/                            a local path, a shared mount (--slurm) or a gs:// URL
      sweep.json, sweep.csv, best.yaml    the sweep's record, its table, the best trial's settings (records.py)
      sweep.lock                          the lock of its record's updates (shared.py)
      slurm-logs/<array job>_<index>.out  each array task's output (--slurm; slurm/sweep_script.py)
      ensemble/<timestamp>/               the ensemble's export (tf_model/ensemble_plan.py)
      trial-NNN/                          a trial's directory: its run_dir, and where others read its records
        trial.yaml                        its settings (trials.py writes them, the ensemble reads them)
        trial.lock                        the array task running it holds this
        trial.log, trial.spec.json, run_summary.json   its output, its TaskSpec, its run's summary (local:
                                          its run_dir's, named by supervise/launch/report.py)
        model/                            its model_dir (model_files/layout.py names what is inside)

With a gs:// sweep directory the trials run locally under runs/sweep-logs/<bucket>/<path>/trial-NNN (their
logs, spec and run summary) and keep trial.yaml, model/ and their progress records (under model/) in the bucket.
"""

from __future__ import annotations

import os

from estimator_mnist import storage
from estimator_mnist.model_files import layout
from estimator_mnist.model_files.layout import under

SWEEP_FILE, CSV_FILE, BEST_FILE = "sweep.json", "sweep.csv", "best.yaml"
LOCK_FILE, TRIAL_LOCK_FILE = "sweep.lock", "trial.lock"
SLURM_LOG_DIR = "slurm-logs"
ENSEMBLE_DIR = "ensemble"
TRIAL_FILE = "trial.yaml"
LOG_FILE, SPEC_FILE = "trial.log", "trial.spec.json"
TRIAL_MODEL_DIR = layout.DEFAULT_MODEL_DIR  # a trial's directory is its run_dir
LOCAL_ROOT = ("runs", "sweep-logs")  # + BUCKET/PATH: the local run_dirs of a sweep whose directory is a bucket


sweep_file, csv_file, best_file = under(SWEEP_FILE), under(CSV_FILE), under(BEST_FILE)  # of the sweep directory
lock_file, ensemble_dir = under(LOCK_FILE), under(ENSEMBLE_DIR)
trial_file, trial_lock_file, trial_model_dir = under(TRIAL_FILE), under(TRIAL_LOCK_FILE), under(TRIAL_MODEL_DIR)


def slurm_log_dir(sweep_dir: str) -> str:
    return os.path.join(sweep_dir, SLURM_LOG_DIR)  # --slurm: a local (shared) directory


def trial_dir(sweep_dir: str, name: str) -> str:
    return storage.join(sweep_dir, name)


def local_trials_root(bucket: str, name: str) -> str:
    """Where the trials of a sweep in gs://bucket/name run (their run_dirs), on this machine."""
    return os.path.abspath(os.path.join(*LOCAL_ROOT, bucket, *name.split("/")))


def trial_records_dir(records: str) -> str:
    """Where the trial's progress records go, as Config.records_dir puts them: model/ on a bucket, else there."""
    return layout.records_dir(trial_model_dir(records), records)
