"""Shared fixtures: prepared MNIST, free loopback ports, and small YAML files."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


from estimator_mnist.cluster import free_loopback_ports as free_ports  # noqa: E402


_STARTED_LAUNCHES = []


def start_launch(path):
    proc = subprocess.Popen([sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(path)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _STARTED_LAUNCHES.append(proc)
    return proc


@pytest.fixture(autouse=True)
def no_launch_outlives_its_test():
    """A test that fails half-way must not leave its cluster running: Ctrl-C the launcher, which stops
    its tasks, and SIGKILL it if that takes too long."""
    yield
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


def launch_cluster(tmp_path, template: str, port_count: int, attempts: int = 3, **fields):
    """Runs `launch` to completion: (exit code, output, run summary or None).

    New free ports are chosen when one was taken between choosing and binding.
    """
    for _ in range(attempts):
        proc = start_launch(write_cluster(tmp_path, template, port_count, **fields))
        out, _ = proc.communicate(timeout=900)
        if proc.returncode == 2 and "already in use" in out:
            continue
        summary_path = tmp_path / "run" / "run_summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
        return proc.returncode, out, summary
    pytest.fail(f"no free ports after {attempts} attempts: {out}")


@pytest.fixture(scope="session")
def mnist_data_dir():
    """The real MNIST, prepared once per machine by the same code as `prepare-data`."""
    from estimator_mnist.config import default_data_dir
    from estimator_mnist.data_prep import prepare_data

    data_dir = default_data_dir()
    print(prepare_data(data_dir, log=lambda m: print(f"prepare-data: {m}")))
    return data_dir


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "cluster.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


from estimator_mnist.launcher import descendants, living_pids as pids_alive  # noqa: E402,F401  (used by the tests)


def pytest_configure(config):
    """Two logical CPUs, so in-graph replication across devices can be tested on one CPU.

    This must run before TensorFlow initialises its runtime, hence here.
    """
    try:
        import tensorflow as tf
    except ImportError:
        return
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
