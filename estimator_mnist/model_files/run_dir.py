"""What a run directory holds about its model_dir: the run summary `launch` writes there (supervise/launch/report.py),
which names the model_dir and the run_dir, read for `summary` and `predict`. No TensorFlow.

A run directory is always local (config/load.py refuses a gs:// run_dir): a gs:// path names no run directory, and
nothing is read from the bucket for it.
"""

from __future__ import annotations

from estimator_mnist import storage
from estimator_mnist.model_files import layout


def launch_summary(path: str) -> dict:
    """The run summary of the run directory `path`, {} when there is none (or `path` is a bucket's)."""
    if storage.is_bucket(path):
        return {}
    return storage.read_json(layout.run_summary_file(path)) or {}


def summarised_model_dir(path: str):
    """The model_dir the run directory `path` names in its run summary, or None."""
    return launch_summary(path).get("model_dir")
