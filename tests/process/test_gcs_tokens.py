"""Token failures told apart (storage/gcs.py), through the real token paths: google-cloud-storage with a service
account key (STORAGE_EMULATOR_HOST unset: it makes the client anonymous), its JWT posted to the tests' proxy,
which answers both clients' token URLs and refuses (401) a storage request without a token it issued
(tests/gcs_answers.py). google-auth tries a token endpoint's 5xx 3 times (about 3 s), then raises RefreshError
with retryable=True; the layer retries that within its bound. invalid_grant is refused for good: exit 2 before
any task."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from estimator_mnist import storage
from estimator_mnist.storage import gcs
from tests.gcs_answers import INVALID_GRANT, tokens_env, write_service_account_key
from tests.helpers import REPO, free_ports


@pytest.fixture
def keyed(gcs_server, gcs_bucket, gcs_env, tmp_path, monkeypatch):
    """This process's storage layer with a service account key: (the bucket's URL, the environment)."""
    env = tokens_env(gcs_env, write_service_account_key(tmp_path))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_AUTH_TOKEN_FOR_TESTING", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(gcs, "_clients", {})
    gcs_server.proxy.tokens.require(expires_in=60)  # a fresh token before every request
    return f"gs://{gcs_bucket}", env


def test_the_layer_gets_its_tokens_from_the_key_and_every_request_carries_one(keyed, gcs_server):
    bucket, _ = keyed
    storage.write_json(storage.join(bucket, "run", "a.json"), {"a": 1})
    assert storage.read_json(storage.join(bucket, "run", "a.json")) == {"a": 1}
    hosts = [r.host for r in gcs_server.proxy.seen()]
    assert hosts.count("oauth2.googleapis.com") >= 2 and "storage.googleapis.com" in hosts
    assert gcs_server.proxy.refused == []


def test_a_token_endpoint_answering_503_for_8_s_is_ridden_out(keyed, gcs_server):
    """Longer than google-auth's own 3 tries: its RefreshError (retryable) is retried by the layer."""
    bucket, _ = keyed
    fault = gcs_server.proxy.inject(503, times=10_000, name="token", seconds=8)
    started = time.monotonic()
    storage.write_json(storage.join(bucket, "run", "b.json"), {"b": 2})
    assert time.monotonic() - started >= 7 and fault.hits > 3
    assert gcs_server.objects(bucket[len("gs://"):]) == {"run/b.json": len('{"b": 2}\n')}


def test_invalid_grant_mid_run_is_exit_1_naming_the_object(keyed, gcs_server):
    bucket, _ = keyed
    fault = gcs_server.proxy.inject(400, times=10_000, name="token", body=INVALID_GRANT)
    started = time.monotonic()
    with pytest.raises(gcs.CredentialsRefused) as info:
        storage.write_json(storage.join(bucket, "run", "c.json"), {"c": 3})
    assert str(info.value).startswith(f"{bucket}/run/c.json: the token endpoint refused this job's credentials "
                                       "(invalid_grant: Invalid JWT Signature.)")
    assert fault.hits <= 2 and time.monotonic() - started < 3  # never the layer's retries (60 s of them)


def test_invalid_grant_is_exit_2_before_any_task(keyed, gcs_server, tmp_path):
    bucket, env = keyed
    gcs_server.proxy.inject(400, times=10_000, name="token", body=INVALID_GRANT)
    cluster = tmp_path / "c.yaml"
    cluster.write_text(f"cluster: {{chief: ['localhost:{free_ports(1)[0]}']}}\nrun_dir: {tmp_path / 'run'}\n"
                       f"model_dir: {bucket}/run\n")
    proc = subprocess.run([sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(cluster)],
                          capture_output=True, text=True, env={**os.environ, **env}, cwd=REPO, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"{bucket}/run: the token endpoint refused this job's credentials (invalid_grant" in lines[0]
    assert not (tmp_path / "run" / "logs").exists() and gcs_server.proxy.refused == []
