"""google-cloud-storage (the storage layer's client) against the GCS test server through the tests' proxy, with
the environment tests/gcs_server.py gives: anonymous, no metadata server, every request past the proxy's faults."""

from __future__ import annotations

import time

import pytest
import requests

from tests.gcs_server import import_google_cloud_storage

storage = import_google_cloud_storage()
from google.api_core import exceptions  # noqa: E402  (after the import above silenced its FutureWarning)
from google.auth.credentials import AnonymousCredentials  # noqa: E402
from google.cloud.storage.retry import DEFAULT_RETRY  # noqa: E402

FAST_RETRY = DEFAULT_RETRY.with_delay(initial=0.01, maximum=0.05)  # the default waits 1 s, doubling


def test_the_client_is_anonymous_and_talks_only_to_the_proxy(gcs_client, gcs_bucket, gcs_server):
    assert isinstance(gcs_client._credentials, AnonymousCredentials)  # pylint: disable=protected-access
    gcs_client.bucket(gcs_bucket).blob("a").upload_from_string(b"x")
    assert gcs_client.bucket(gcs_bucket).blob("a").download_as_bytes() == b"x"
    assert {r.host for r in gcs_server.proxy.seen()} == {f"127.0.0.1:{gcs_server.proxy.port}"}
    assert gcs_server.proxy.connect_targets == [] and gcs_server.proxy.refused == []


def test_create_if_absent_succeeds_once(gcs_client, gcs_bucket):
    blob = gcs_client.bucket(gcs_bucket).blob("lock")
    blob.upload_from_string(b"first", if_generation_match=0)
    with pytest.raises(exceptions.PreconditionFailed):
        gcs_client.bucket(gcs_bucket).blob("lock").upload_from_string(b"second", if_generation_match=0)
    assert blob.download_as_bytes() == b"first"


def test_a_generation_matched_overwrite_wins_once(gcs_client, gcs_bucket):
    blob = gcs_client.bucket(gcs_bucket).blob("record")
    blob.upload_from_string(b"v1", if_generation_match=0)
    first = blob.generation
    blob.upload_from_string(b"v2", if_generation_match=first)
    assert blob.generation != first
    with pytest.raises(exceptions.PreconditionFailed):
        gcs_client.bucket(gcs_bucket).blob("record").upload_from_string(b"v3", if_generation_match=first)
    assert blob.download_as_bytes() == b"v2"


@pytest.mark.parametrize("status", [503, 429])
def test_503_and_429_are_retried_then_the_upload_lands(gcs_client, gcs_bucket, gcs_server, status):
    fault = gcs_server.proxy.inject(status, times=2, method="POST", name="flaky")
    gcs_client.bucket(gcs_bucket).blob("flaky").upload_from_string(b"x", if_generation_match=0, retry=FAST_RETRY)
    assert fault.hits == 2 and gcs_server.proxy.count(method="POST", name="flaky") == 3
    assert gcs_server.objects(gcs_bucket) == {"flaky": 1}


def test_503_without_retry_is_the_client_s_service_unavailable(gcs_client, gcs_bucket, gcs_server):
    gcs_server.put_object(gcs_bucket, "down", b"x")
    gcs_server.proxy.inject(503, times=1, name="down")
    with pytest.raises(exceptions.ServiceUnavailable):
        gcs_client.bucket(gcs_bucket).blob("down").download_as_bytes(retry=None)


def test_a_denied_object_is_forbidden_and_not_retried(gcs_client, gcs_bucket, gcs_server):
    gcs_server.put_object(gcs_bucket, "secret", b"x")
    gcs_server.proxy.inject(403, times=100, name="secret")
    with pytest.raises(exceptions.Forbidden):
        gcs_client.bucket(gcs_bucket).blob("secret").download_as_bytes(retry=FAST_RETRY)
    assert gcs_server.proxy.count(name="secret") == 1


def test_a_stalled_request_times_out(gcs_client, gcs_bucket, gcs_server):
    gcs_server.put_object(gcs_bucket, "slow", b"x")
    fault = gcs_server.proxy.stall(5, times=1, name="slow")
    started = time.monotonic()
    with pytest.raises(requests.exceptions.Timeout):
        gcs_client.bucket(gcs_bucket).blob("slow").download_as_bytes(timeout=0.5, retry=None)
    assert fault.hits == 1 and time.monotonic() - started < 4


def test_a_bucket_that_does_not_exist_is_the_emulator_s_404(gcs_client, gcs_server):
    assert gcs_client.lookup_bucket("no-such-bucket") is None
    with pytest.raises(exceptions.NotFound):
        gcs_client.bucket("no-such-bucket").blob("x").upload_from_string(b"x", if_generation_match=0)
    assert gcs_server.proxy.count(method="POST", name="no-such-bucket") == 1  # a 404 is not retried
