"""The GCS test server (tests/gcs_server.py) proven with the two clients the product uses, unmocked: TensorFlow
2.15's built-in gs:// file system (in one subprocess, tests/process/gcs_tf_probe.py) and google-cloud-storage
(in this process), both through the tests' proxy, which injects faults and lets nothing leave loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import psutil
import pytest

from tests.gcs_proxy import GOOGLE_HOSTS, TF_AGENT
from tests.gcs_server import BINARY_SHA256, GcsServer, GcsUnavailable, emulator_binary
from tests.helpers import REPO

# TF's GCS settings for the probe (tsl/platform/cloud/gcs_file_system.cc): no sleep between retries (the default
# sleeps 1 s, doubling, plus up to 1 s of jitter), 3 retries, and a stalled metadata or read request abandoned
# after 2 s (default: 3600 s).
TF_GCS_SETTINGS = {"GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "0", "GCS_RETRY_CONFIG_MAX_RETRIES": "3",
                   "GCS_METADATA_REQUEST_TIMEOUT_SECS": "2", "GCS_READ_REQUEST_TIMEOUT_SECS": "2"}
FAULTED_OBJECTS = ("flaky-503", "throttled-429", "denied-read", "stalled", "down")


@pytest.fixture(scope="module")
def tf_probe(gcs_server):
    """The probe's results ({step: outcome}) and what the proxy saw, for the TF tests of this module to judge."""
    gcs_server.proxy.reset()
    bucket = gcs_server.create_bucket()
    for name in FAULTED_OBJECTS:
        gcs_server.put_object(bucket, f"faults/{name}", f"content of {name}".encode())
    proxy = gcs_server.proxy
    faults = {"flaky-503": proxy.inject(503, times=2, method="GET", name="faults/flaky-503"),
              "throttled-429": proxy.inject(429, times=2, method="GET", name="faults/throttled-429"),
              "denied-read": proxy.inject(403, times=100, name="faults/denied-read"),
              "denied-write": proxy.inject(403, times=100, name="faults/denied-write"),
              "stalled": proxy.stall(30, times=1, method="GET", name="faults/stalled"),
              "down": proxy.inject(503, times=1000, name="faults/down")}
    env = {**os.environ, **gcs_server.env(), **TF_GCS_SETTINGS}
    result = subprocess.run([sys.executable, "-m", "tests.process.gcs_tf_probe", bucket, "no-such-bucket"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    yield {"steps": json.loads(lines[0][len("RESULT "):]), "faults": faults, "bucket": bucket,
           "seen": proxy.seen(), "connects": proxy.connect_targets, "refused": proxy.refused,
           "objects": gcs_server.objects(bucket)}
    gcs_server.proxy.reset()


def requests_naming(probe, fragment):
    return [r for r in probe["seen"] if r.names(fragment)]


def test_tf_gfile_through_the_proxy(tf_probe):
    steps = {name: outcome.get("ok", outcome) for name, outcome in tf_probe["steps"].items()}
    assert steps["stat_empty"] == 0  # an empty object (TF sends `Transfer-Encoding: identity`: gcs_proxy.py)
    assert steps["read"] == "hello gcs" and steps["read_big_equal"] is True
    assert steps["listdir"] == ["a.txt", "big.bin", "empty", "sub/"]
    assert steps["exists_old"] is False and steps["read_new"] == "hello gcs"  # rename: copy, then delete
    assert steps["glob"] == [f"gs://{tf_probe['bucket']}/dir/b.txt"]
    assert steps["exists_removed"] is False
    rewrites = [r for r in tf_probe["seen"] if "/rewriteTo/" in r.target and "dir/a.txt" in r.target]
    deletes = [r for r in tf_probe["seen"] if r.method == "DELETE" and r.target.endswith("/o/dir/a.txt")]
    assert len(rewrites) == 1 and len(deletes) == 1
    assert {name for name in tf_probe["objects"] if name.startswith("dir/")} == {"dir/", "dir/sub/", "dir/empty",
                                                                                "dir/big.bin"}


def test_tf_checkpoint_saves_and_restores_on_the_bucket(tf_probe):
    steps = tf_probe["steps"]
    assert steps["checkpoint_save"]["ok"] == f"gs://{tf_probe['bucket']}/ckpt/model-1"
    assert steps["checkpoint_restore"]["ok"] == sum(range(1000))
    assert {"ckpt/checkpoint", "ckpt/model-1.index"} <= set(tf_probe["objects"])


def test_tf_retries_503_and_429_then_reads(tf_probe):
    steps = tf_probe["steps"]
    for name, step in (("flaky-503", "read_after_503s"), ("throttled-429", "read_after_429s")):
        assert steps[step] == {"ok": f"content of {name}", "secs": steps[step]["secs"]}
        assert tf_probe["faults"][name].hits == 2
        metadata = [r for r in requests_naming(tf_probe, f"faults/{name}") if r.host == "www.googleapis.com"]
        assert len(metadata) == 3  # two answered 503 (429), the third reached the emulator


def test_tf_gives_up_after_its_retries_with_an_aborted_error(tf_probe):
    outcome = tf_probe["steps"]["read_while_down"]
    assert outcome["error"] == "AbortedError" and "All 3 retry attempts failed" in outcome["message"]
    assert len(requests_naming(tf_probe, "faults/down")) == 4  # one try and 3 retries, no second layer of them


def test_tf_does_not_retry_a_denied_object(tf_probe):
    steps = tf_probe["steps"]
    assert steps["read_denied"]["error"] == "PermissionDeniedError" and "403" in steps["read_denied"]["message"]
    assert len(requests_naming(tf_probe, "faults/denied-read")) == 1
    assert steps["write_denied"]["error"] == "PermissionDeniedError"
    # The write's upload is started again by flush and close (each once), not retried: 3 POSTs, all refused.
    assert {r.method for r in requests_naming(tf_probe, "faults/denied-write")} == {"POST"}
    assert "faults/denied-write" not in tf_probe["objects"]


def test_tf_abandons_a_stalled_request_and_retries(tf_probe):
    outcome = tf_probe["steps"]["read_after_stall"]
    assert outcome["ok"] == "content of stalled" and outcome["secs"] >= 2  # GCS_METADATA_REQUEST_TIMEOUT_SECS
    assert tf_probe["faults"]["stalled"].hits == 1


def test_tf_sees_a_missing_bucket_as_not_found(tf_probe):
    steps = tf_probe["steps"]
    assert steps["missing_bucket_exists"]["ok"] is False
    assert steps["missing_bucket_write"]["error"] == "NotFoundError"
    assert "404" in steps["missing_bucket_write"]["message"]  # the emulator's own answer: no fault armed


def test_tf_reached_only_google_s_storage_names_through_the_proxy(tf_probe):
    assert set(tf_probe["connects"]) == {"www.googleapis.com:443", "storage.googleapis.com:443"}
    assert tf_probe["refused"] == []
    # TensorFlow's own requests: a late request of the session's google-cloud-storage client from an earlier test
    # (named by 127.0.0.1:PORT, the emulator's host it is given) once landed after the probe's reset.
    from_tf = [r for r in tf_probe["seen"] if TF_AGENT in r.agent]
    assert from_tf and {r.host for r in from_tf} <= set(GOOGLE_HOSTS)


def test_the_proxy_refuses_every_other_destination(gcs_server):
    gcs_server.proxy.reset()
    answers = []
    for request in (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
                    b"CONNECT www.googleapis.com:80 HTTP/1.1\r\nHost: www.googleapis.com:80\r\n\r\n",
                    b"GET http://169.254.169.254/computeMetadata/v1/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", gcs_server.proxy.port), timeout=10) as connection:
            connection.sendall(request)
            answers.append(connection.recv(4096).split(b"\r\n")[0])
    assert answers == [b"HTTP/1.1 403 Forbidden"] * 3
    assert gcs_server.proxy.refused == ["example.com:443", "www.googleapis.com:80",
                                        "http://169.254.169.254/computeMetadata/v1/"]
    assert gcs_server.proxy.seen() == []  # nothing refused reached the emulator, nor counted as a request
    gcs_server.proxy.reset()


def _credentials_search(gcs_server, tmp_path, no_gce_check: str) -> str:
    gcs_server.proxy.reset()
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}
    env.update(gcs_server.env(), NO_GCE_CHECK=no_gce_check, CLOUDSDK_CONFIG=str(tmp_path))  # no gcloud login
    result = subprocess.run([sys.executable, "-m", "tests.process.gcs_auth_probe"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("RESULT "), result.stderr[-2000:]
    return result.stdout


def test_no_gce_check_true_keeps_google_auth_off_the_metadata_server(gcs_server, tmp_path):
    assert "RESULT no credentials" in _credentials_search(gcs_server, tmp_path, "true")
    assert gcs_server.proxy.refused == []


def test_a_changed_binary_is_refused(monkeypatch):
    name = next(iter(BINARY_SHA256))
    monkeypatch.setitem(BINARY_SHA256, name, "0" * 64)
    with pytest.raises(GcsUnavailable, match="refusing to run it"):
        emulator_binary()


def test_stop_ends_the_emulator_and_the_proxy(tmp_path):
    with GcsServer(tmp_path) as gcs:
        emulator, port = gcs.process, gcs.proxy.port
        assert emulator.poll() is None
    assert emulator.poll() is not None and not psutil.pid_exists(emulator.pid)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
