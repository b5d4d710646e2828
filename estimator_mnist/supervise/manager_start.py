"""A task started by a cluster manager (Kubeflow's operator re-creating a pod): its start counted against the job's
restart budget (restart_budget.py) before `train` starts its TensorFlow process. No TensorFlow."""

from __future__ import annotations

import sys
from typing import Mapping

from estimator_mnist.model_files import checkpoints
from estimator_mnist.errors import PermanentFailure
from estimator_mnist.model_files.layout import budget_file
from estimator_mnist.plan.resolved_task import ResolvedTask
from estimator_mnist.supervise.restart_budget import budget_line, check_start, job_of


def start_allowed(resolved: ResolvedTask, environ: Mapping[str, str]) -> bool:
    """Under a cluster manager (no --task), counts the start against the job's restart budget; False (its line
    printed) past it."""
    source, config = resolved.source, resolved.config
    if source.by_hand:
        return True
    view = {"environment": "cloud", "cluster": source.tf_config["cluster"]} \
        if source.gpus_from_manager and source.tf_config else None
    job = job_of(environ, view)
    try:
        incident = check_start(source.task, config.cluster, job, config.restart.max_restarts, config.model_dir,
                               checkpoints.latest_step(config.model_dir))
    except PermanentFailure as exc:
        print(f"estimator-mnist: error: {exc}", file=sys.stderr, flush=True)
        return False
    if incident is not None:
        print(f"estimator-mnist: {budget_line(incident, job.key, config.restart.max_restarts)}; the record: "
              f"{budget_file(config.model_dir)}", file=sys.stderr, flush=True)
    return True
