"""The small records the tasks of a Slurm step share through model_dir: each task's port, each task's ending.

Tasks of one step run on different nodes and share only model_dir (on storage every node sees). Each record
is one small JSON object, written whole (atomically) by one task and read by the others or by the batch
script; nothing else is needed of the storage: no lock, no rename by readers, no listing. `publish` and
`read_published` are the only two functions that touch these files, so that model_dir's storage layer
(local disk or a bucket) can take them over in one place.

The records live in model_dir/slurm/<job id>/, one file per rank and kind, each overwritten by the same rank
in the job's next step: a record names the step it belongs to (`step_key`), and a reader takes only its own
step's. A requeue keeps them (the job goes on); the job's end, whatever it is (done, failed, cancelled,
preempted for good), removes its directory (`remove_job`), so model_dir keeps none of a finished job. No
TensorFlow.
"""

from __future__ import annotations

from typing import Mapping, Optional

from estimator_mnist import storage
from estimator_mnist.model_files import layout

ATTEMPT_ENV = "ESTIMATOR_MNIST_SLURM_ATTEMPT"  # the batch script's run of its step: "<requeues>.<reruns>"


record_path = layout.slurm_record_file
job_dir = layout.slurm_job_dir


def publish(model_dir: str, job_id: str, kind: str, rank: int, record: dict) -> str:
    """Writes `record` whole for the other nodes (an atomic write of a small JSON object)."""
    path = record_path(model_dir, job_id, kind, rank)
    storage.write_json(path, record)  # whole, on a disk (a rename) and on a bucket (an upload) alike
    return path


def read_published(model_dir: str, job_id: str, kind: str, rank: int) -> Optional[dict]:
    """The record `rank` published last, or None (none yet, or cut short); a storage error is raised named."""
    record = storage.read_json(record_path(model_dir, job_id, kind, rank))
    return record if isinstance(record, dict) else None


def remove_job(model_dir: str, job_id: str) -> None:
    """The job's records, at its end: nothing of them is read again (a resubmitted job has a new id)."""
    storage.rmtree(job_dir(model_dir, job_id))


def step_key(environ: Mapping[str, str]) -> str:
    """Which run of a step a record belongs to, the same for every task of the step: the batch script's attempt
    when it started the step, else the job's requeues and Slurm's step id."""
    attempt = environ.get(ATTEMPT_ENV)
    if attempt:
        return f"attempt {attempt}"
    return f"requeue {environ.get('SLURM_RESTART_COUNT') or 0} step {environ.get('SLURM_STEP_ID', '?')}"
