"""Shared by the process tier: a small cluster config, stand-in task commands, and a launcher run."""

import io
import json
import sys
import time
from pathlib import Path

import numpy as np

from estimator_mnist.mnist_data import decoded as decoded_mnist
from estimator_mnist.config import config_from_dict
from estimator_mnist.supervise.launch import Launcher

FAKE = str(Path(__file__).parent / "fake_task.py")
HEALTHY = {"chief:0": "chief_ok", "worker:0": "worker_ok", "evaluator:0": "evaluator_ok"}
ON_FAILURE = {"policy": "on_failure", "max_restarts": 2, "backoff_secs": 0}


def make_config(tmp_path, launcher=None, evaluator=True, ports=(1, 2), restart=None, **extra):
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    if evaluator:
        cluster["evaluator"] = "localhost"
    return config_from_dict({
        "cluster": cluster,
        "training": {"max_steps": 100, "save_checkpoints_steps": 50, "session_creation_timeout_secs": 2},
        "launcher": {"grace_secs": 1, "finish_timeout_secs": 2, "stall_timeout_secs": 30,
                     **(launcher or {})},
        "evaluation": {"final_timeout_secs": 20, **extra.pop("evaluation", {})},
        "restart": restart or {"policy": "never"},
        "run_dir": str(tmp_path / "run"),
        "data_dir": str(tmp_path / "data"),
        **extra,
    }, str(tmp_path / "cluster.yaml"))


def mark_data_prepared(config):
    """What launch checks for, without preparing MNIST: a TFDS version directory and a (tiny) decoded copy."""
    version_dir = Path(config.data_dir, "mnist", "3.0.1")
    version_dir.mkdir(parents=True)
    (version_dir / "dataset_info.json").write_text("{}")
    pair = (np.zeros((2, 28, 28), np.uint8), np.zeros(2, np.int64))
    decoded_mnist.write(config.data_dir, {"train": pair, "test": pair}, source="test")


def fake_commands(config, behaviours):
    cluster = config.cluster

    def command_for(task):
        port = cluster.address(task).port if not task.is_evaluator else 0
        return [sys.executable, FAKE, behaviours[str(task)], config.run_dir, config.model_dir, str(task),
                str(config.training.max_steps), str(port)]
    return command_for


def run(config, behaviours):
    """(exit code, console output, run summary, seconds, task pids) of a launcher run with stand-in tasks."""
    out = io.StringIO()
    launcher = Launcher(config, "cluster.yaml", out=out, command_for=fake_commands(config, behaviours))
    started = time.monotonic()
    code = launcher.run()
    summary = json.loads(Path(config.run_dir, "run_summary.json").read_text())
    pids = [t["pid"] for t in summary["tasks"].values()]
    return code, out.getvalue(), summary, time.monotonic() - started, pids
