"""A token endpoint that fails mid-run, with model_dir on a bucket and a service account key: both clients take
their real token paths through the tests' proxy, which answers both token URLs with short-lived tokens (so each
request asks for one) and refuses storage requests without one (tests/gcs_answers.py). STORAGE_EMULATOR_HOST is
unset (it makes google-cloud-storage anonymous), and GOOGLE_AUTH_TOKEN_FOR_TESTING too (it skips TensorFlow's).

The endpoint answers 503 for 20 s once the first checkpoint is in the bucket: the product's own requests ride
it out (google-auth's RefreshError is retryable; the layer retries within STORAGE_RETRY_SECS); a TensorFlow 2.15
request in that time goes without a token and is refused (401), which the task tells apart from a key refused
for good and ends with 200; launch restarts it (restart.policy: on_failure) and the run finishes. invalid_grant (a key
refused for good) is exit 2 before any task: tests/process/test_gcs_tokens.py."""

from __future__ import annotations

import os
import time

from tests.gcs_answers import tokens_env, write_service_account_key
from tests.gcs_faults import TF_AGENT
from tests.helpers import start_launch, write_cluster

YAML = """
cluster: {{chief: ["localhost:{p0}"]}}
training: {{batch_size_per_replica: 32, max_steps: 60, save_checkpoints_steps: 20, log_step_count_steps: 10}}
tasks: {{all: {{step_delay_ms: 100}}}}
restart: {{policy: on_failure, max_restarts: 3, backoff_secs: 2}}
launcher: {{grace_secs: 5, stall_timeout_secs: 300}}
run_dir: {run_dir}
data_dir: {data_dir}
model_dir: {model_dir}
"""
OUTAGE_SECS = 20
WAIT_SECS = 600


def test_a_token_endpoint_answering_503_for_20_s_mid_run_then_recovering_the_run_finishes(gcs_server, mnist_data_dir,
                                                                                         tmp_path):
    gcs_server.proxy.reset()
    bucket = gcs_server.create_bucket()
    env = {**os.environ, **tokens_env(gcs_server.env(), write_service_account_key(tmp_path))}
    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_AUTH_TOKEN_FOR_TESTING"):
        env.pop(name, None)
    gcs_server.proxy.tokens.require(expires_in=60)
    proc = start_launch(write_cluster(tmp_path, YAML, 1, data_dir=mnist_data_dir, model_dir=f"gs://{bucket}/run"),
                        env=env)
    deadline = time.monotonic() + WAIT_SECS
    while "run/model.ckpt-20.index" not in gcs_server.objects(bucket):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.5)
    outage = gcs_server.proxy.inject(503, times=1_000_000, name="token", seconds=OUTAGE_SECS)
    out, _ = proc.communicate(timeout=WAIT_SECS)
    lines = out.strip().splitlines()
    token_hosts = {r.host for r in gcs_server.proxy.seen() if "token" in r.target}
    gcs_server.proxy.reset()
    assert proc.returncode == 0 and lines[-1].startswith("finished:") and "global_step=60" in lines[-1], out[-4000:]
    assert token_hosts == {"oauth2.googleapis.com", "www.googleapis.com"}, out[-4000:]
    # The product's own requests met the outage (google-auth's token requests) and rode it out: before, its
    # RefreshError was a traceback and exit 1. TensorFlow meets it only if it asks for a token within the 20 s
    # (the chief's step waits on its progress record meanwhile, so it often does not); when it does, its 401 is
    # told apart: exit 200, and launch restarts the task (tests/unit/test_bucket_errors.py has TF's own message).
    assert any(TF_AGENT not in agent for agent in outage.hit_agents), (outage.hit_agents, out[-4000:])
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*.log"))
    told = [line for line in logs.splitlines() if "TensorFlow's request went without an access token" in line]
    assert all("exiting with 200" in line for line in told), (told, out[-4000:])
    assert "run/model.ckpt-60.index" in gcs_server.objects(bucket)
    assert "Traceback" not in out, out[-4000:]
