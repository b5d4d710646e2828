"""Helpers shared by the test tiers: the repository root, free ports, YAML files, launching clusters."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_loopback_ports as free_ports  # noqa: F401  (re-exported for the tests)
from estimator_mnist.supervise.process_group import living_pids as pids_alive  # noqa: F401
from tests.process_table import descendants  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
_STARTED_LAUNCHES = []


# Two localhost workers with MultiWorkerMirrored and an evaluator: the e2e tests' usual real cluster.
CLUSTER_YAML = """
cluster:
  worker: ["localhost:{p0}", "localhost:{p1}"]
  evaluator: localhost
strategy: {{name: multi_worker_mirrored, communication: ring, collective_timeout_secs: 300}}
training: {{batch_size_per_replica: 64, max_steps: {steps}, save_checkpoints_steps: {save}, log_step_count_steps: 10}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0}}
launcher: {{grace_secs: 5, stall_timeout_secs: 300}}
run_dir: {run_dir}
data_dir: {data_dir}
"""

# TensorFlow's known start-up lines (startup_noise.KNOWN_STARTUP_LINES) as TF 2.15.1 printed them in `estimator-mnist train`
# by hand (TF_CPP_MIN_LOG_LEVEL=0), 2026-11-25.
TF_STARTUP_LINES = [
    "2026-11-25 05:57:20.356412: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] Unable to register "
    "cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered",
    "2026-11-25 05:57:20.356467: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:607] Unable to register "
    "cuFFT factory: Attempting to register factory for plugin cuFFT when one has already been registered",
    "2026-11-25 05:57:20.358429: E external/local_xla/xla/stream_executor/cuda/cuda_blas.cc:1515] Unable to register "
    "cuBLAS factory: Attempting to register factory for plugin cuBLAS when one has already been registered",
    "2026-11-25 05:57:21.210130: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT Warning: Could not "
    "find TensorRT",
    "2026-11-25 05:57:26.049241: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on. You may see "
    "slightly different numerical results due to floating-point round-off errors from different computation orders. "
    "To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
]

def run_cli(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    """`python -m estimator_mnist ARGS` in a fresh process, without any TF_CONFIG of ours."""
    full_env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "estimator_mnist", *args], capture_output=True, text=True,
                          cwd=REPO, env=full_env, timeout=timeout)


def start_launch(path, *extra, env=None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(path), *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    _STARTED_LAUNCHES.append(proc)
    return proc


def stop_started_launches() -> None:
    """A test that fails half-way must not leave its cluster running: Ctrl-C each launcher, which stops
    its tasks, and SIGKILL it if that takes too long."""
    while _STARTED_LAUNCHES:
        proc = _STARTED_LAUNCHES.pop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def write_cluster(tmp_path, template: str, port_count: int, **fields) -> Path:
    """Writes `template` with fresh loopback ports p0..pN, run_dir and data_dir filled in."""
    ports = {f"p{i}": port for i, port in enumerate(free_ports(port_count))}
    path = tmp_path / "cluster.yaml"
    path.write_text(template.format(run_dir=tmp_path / "run", **ports, **fields), encoding="utf-8")
    return path


def launch_cluster(tmp_path, template: str, port_count: int, attempts: int = 3, env=None, **fields):
    """Runs `launch` to completion (in `env`, or this process's environment): (exit code, output, run summary
    or None).

    New free ports are chosen when one was taken between choosing and binding.
    """
    for _ in range(attempts):
        proc = start_launch(write_cluster(tmp_path, template, port_count, **fields), env=env)
        out, _ = proc.communicate(timeout=900)
        if proc.returncode == 2 and "already in use" in out:
            continue
        summary_path = tmp_path / "run" / "run_summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
        return proc.returncode, out, summary
    pytest.fail(f"no free ports after {attempts} attempts: {out}")


def make_export(model_dir, stamp):
    """An empty stand-in export (saved_model.pb of no bytes) of a model_dir, for the code that only finds exports."""
    folder = Path(model_dir) / "export" / "latest" / str(stamp)
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"")
    return folder


def error_pattern(template: str) -> str:
    """A regex for an error template (the module's constant): each {field} matches anything."""
    return ".*".join(re.escape(part) for part in re.split(r"\{\w+(?:!r)?(?::[^}]*)?\}", template))


def record_autograph_conversions(monkeypatch) -> list:
    """The names of the functions AutoGraph converts from now on, until the test ends."""
    from tensorflow.python.autograph.pyct import transpiler  # pylint: disable=import-outside-toplevel

    converted = []
    transform = transpiler.PyToPy.transform_function

    def recording(self, fn, *args, **kwargs):
        converted.append(getattr(fn, "__name__", str(fn)))
        return transform(self, fn, *args, **kwargs)

    monkeypatch.setattr(transpiler.PyToPy, "transform_function", recording)
    return converted


def planned(config, task, precision="float32", **facts):
    """The task's plan with `precision` as what it resolved to (TaskPlan.with_precision, as a task's TensorFlow
    process does it), for tests that build an Estimator without a TaskSpec."""
    import dataclasses  # pylint: disable=import-outside-toplevel

    from estimator_mnist.plan.task_plan import plan_task  # pylint: disable=import-outside-toplevel

    plan = plan_task(config, task, **facts)
    evaluation = "auto" if config.evaluation.precision == "training" else "float32"
    return dataclasses.replace(plan, precision="auto", cpu_precision=precision,
                               evaluation_precision=evaluation).with_precision([])
