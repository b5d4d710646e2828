"""pytest fixtures for tests against the GCS API server (tests/gcs_server.py), for every tier (tests/conftest.py
imports them):

- gcs_server: one server and proxy per test session (per pytest-xdist worker), stopped at its end;
- gcs_bucket: a fresh empty bucket's name for each test; the proxy's faults and records are cleared around it;
- gcs_env: the variables a process needs to reach it ({**os.environ, **gcs_env} for a subprocess: run_cli(...,
  env=gcs_env), start_launch(..., env={**os.environ, **gcs_env}));
- gcs_client: google-cloud-storage's Client in this process, through the proxy with gcs_env set (monkeypatch).

Where the server cannot run (the dev extra not installed, a changed binary) the test is skipped, and under CI=1 it
fails: CI installs the dev extra, so a missing server there is a fault of the set-up, never a reason to skip.
"""

from __future__ import annotations

import os
from typing import Dict

import pytest

from tests.gcs_server import GcsServer, GcsUnavailable, import_google_cloud_storage


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    try:
        server = GcsServer(tmp_path_factory.mktemp("gcs-server"))
        server.__enter__()
    except GcsUnavailable as unavailable:
        if os.environ.get("CI"):
            pytest.fail(f"{unavailable}; in CI this is a failure, not a skip")
        pytest.skip(str(unavailable))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_server) -> str:
    gcs_server.proxy.reset()
    yield gcs_server.create_bucket()
    gcs_server.proxy.reset()


@pytest.fixture
def gcs_env(gcs_server) -> Dict[str, str]:
    return gcs_server.env()


@pytest.fixture
def gcs_client(gcs_env, monkeypatch):
    for key, value in gcs_env.items():
        monkeypatch.setenv(key, value)
    return import_google_cloud_storage().Client()
