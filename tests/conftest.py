"""Fixtures for every tier. Tiers are directories: unit (no real data, no processes), process (the
launcher and CLI with stand-in tasks), e2e (real TensorFlow clusters); run_tests.sh runs them in that order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gcs_fixtures import gcs_bucket, gcs_client, gcs_env, gcs_server  # noqa: F401  (fixtures for every tier)
from tests.helpers import stop_started_launches

# gRPC's fork support (grpcio 1.85, on unless this says 0) restarts its event-engine poller in a forked child;
# subprocess then closes the child's descriptors before its exec, and the poller aborts the child on epoll_wait's
# EBADF (grpc/grpc#43055). A pytest worker whose gRPC client had run (a serve test's) forked a sweep trial that
# died with SIGABRT before its exec (fresh-clone CI, 2026-11-29). Every process the suite forks execs, so gRPC's
# fork handlers buy nothing here; set before any test module imports grpc, inherited by every subprocess.
# tests/process/test_grpc_fork.py fails without it. The product is not exposed: its only gRPC user, serve, forks
# nothing.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "0"


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
