"""Fixtures for every tier. Tiers are directories: unit (no real data, no processes), process (the
launcher and CLI with stand-in tasks), e2e (real TensorFlow clusters); run_tests.sh runs them in that order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gcs_fixtures import gcs_bucket, gcs_client, gcs_env, gcs_server  # noqa: F401  (fixtures for every tier)
from tests.helpers import stop_started_launches


@pytest.fixture(autouse=True)
def no_launch_outlives_its_test():
    yield
    stop_started_launches()


@pytest.fixture(autouse=True)
def benchmark_results(tmp_path, monkeypatch) -> Path:
    """Where a benchmark a test runs appends its line (benchmarks/results.py): a temporary file, never the
    committed docs/benchmark_results.jsonl. Subprocesses inherit it."""
    path = tmp_path / "benchmark_results.jsonl"
    monkeypatch.setenv("ESTIMATOR_MNIST_BENCHMARK_RESULTS", str(path))
    return path


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "cluster.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
