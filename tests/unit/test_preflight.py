"""The preflight of a gs:// model_dir (storage.check_bucket), before any task starts: a bucket that does not
exist or no credentials are one line and exit 2 with nothing written, access refused is exit 1 naming the bucket;
`validate` makes no network call and says what it cannot check offline. The storage layer's client is replaced
at its boundary (gcs.client) or by the memory bucket: no test here contacts any address. The same code against a
real GCS API server is the e2e tier's (STORAGE_EMULATOR_HOST reaches gcs.client)."""

import os
import re

import pytest

from estimator_mnist import cli, commands, storage
from estimator_mnist.storage import gcs
from estimator_mnist.storage.errors import (ERR_DENIED, ERR_NO_BUCKET, ERR_NO_CREDENTIALS, StorageDenied,
                                            StorageUnavailable, StorageUsageError)
from tests import memory_bucket

URL = "gs://bk1/runs/mnist"
YAML = "cluster: {chief: ['localhost:2222'], worker: ['localhost:2223']}\nmodel_dir: %s\n"


def pattern(template):
    return ".*".join(re.escape(part) for part in re.split(r"\{[a-z_!r]+\}", template))


class FakeClient:
    """google.cloud.storage.Client's list_blobs, answering as the server would."""

    def __init__(self, error=None):
        self.error, self.calls = error, []

    def list_blobs(self, bucket, **kwargs):
        self.calls.append((bucket, kwargs))
        if self.error is not None:
            raise self.error
        return iter([])


@pytest.fixture
def fake_client(monkeypatch):
    def install(error=None):
        client = FakeClient(error)
        monkeypatch.setattr(gcs, "client", lambda path="gs://": client)
        return client

    return install


def test_a_bucket_that_exists_passes_and_only_its_prefix_is_listed(fake_client):
    client = fake_client()
    storage.check_bucket(URL)
    ((bucket, kwargs),) = client.calls
    assert bucket == "bk1" and kwargs["prefix"] == "runs/mnist/" and kwargs["max_results"] == 1


def test_a_local_model_dir_needs_no_preflight(fake_client, tmp_path):
    client = fake_client()
    storage.check_bucket(str(tmp_path / "model"))
    assert client.calls == []


def test_a_bucket_that_does_not_exist_is_a_usage_error(fake_client):
    from google.api_core import exceptions

    fake_client(exceptions.NotFound("The specified bucket does not exist."))
    with pytest.raises(StorageUsageError, match=pattern(ERR_NO_BUCKET)) as caught:
        storage.check_bucket(URL)
    assert str(caught.value).startswith(f"{URL}: the bucket gs://bk1 does not exist")


def test_access_refused_is_a_permanent_failure_naming_the_bucket(fake_client):
    from google.api_core import exceptions

    fake_client(exceptions.Forbidden("ci@p.iam.gserviceaccount.com does not have storage.objects.list access"))
    with pytest.raises(StorageDenied, match=pattern(ERR_DENIED)) as caught:
        storage.check_bucket(URL)
    assert str(caught.value).startswith(URL) and "storage.objects.list" in str(caught.value)


def test_credentials_the_token_endpoint_refuses_are_a_usage_error_at_once(fake_client):
    from google.auth.exceptions import RefreshError

    client = fake_client(RefreshError("invalid_grant: Invalid JWT Signature.", retryable=False))
    with pytest.raises(StorageUsageError, match=pattern(gcs.ERR_TOKEN_REFUSED)) as caught:
        storage.check_bucket(URL)
    assert str(caught.value).startswith(f"{URL}: the token endpoint refused") and "invalid_grant" in str(caught.value)
    assert len(client.calls) == 1  # google-auth says it is not retryable: never asked again


class RetryingClient(FakeClient):
    """list_blobs under the retry the layer passes (as google-cloud-storage applies it), failing `errors` first."""

    def list_blobs(self, bucket, **kwargs):
        def attempt():
            self.calls.append((bucket, kwargs))
            if self.errors:
                raise self.errors.pop(0)
            return iter([])
        return kwargs["retry"](attempt)()


def _retrying(monkeypatch, errors):
    client = RetryingClient()
    client.errors = list(errors)
    monkeypatch.setattr(gcs, "client", lambda path="gs://": client)
    return client


def test_a_token_endpoint_failing_retryably_is_retried_within_the_bound(monkeypatch):
    """google-auth's RefreshError.retryable (a 503 from the token endpoint, after google-auth's own 3 tries)."""
    from google.auth.exceptions import RefreshError

    client = _retrying(monkeypatch, [RefreshError("503 backendError", retryable=True)] * 2)
    storage.check_bucket(URL)
    assert len(client.calls) == 3


def test_a_token_endpoint_that_stays_down_is_exit_200_naming_the_url(monkeypatch):
    from google.auth.exceptions import RefreshError

    monkeypatch.setattr(gcs, "RETRY_SECS", 1.0)
    _retrying(monkeypatch, [RefreshError("503 backendError", retryable=True)] * 100)
    with pytest.raises(StorageUnavailable) as caught:
        storage.check_bucket(URL)
    assert str(caught.value).startswith(f"{URL}: the storage failed to serve it for 1 s (no access token")


def test_mid_run_a_refused_token_is_exit_1_naming_the_object_and_a_passing_one_200():
    from google.auth.exceptions import RefreshError

    from estimator_mnist.errors import PermanentFailure, RetryableFailure

    obj = f"{URL}/progress/chief-0.json"
    with pytest.raises(PermanentFailure, match=pattern(gcs.ERR_TOKEN_REFUSED)) as caught:
        with gcs.mapped(obj):
            raise RefreshError("invalid_grant: Token has been expired or revoked.", retryable=False)
    assert str(caught.value).startswith(obj) and not isinstance(caught.value, StorageUsageError)
    with pytest.raises(RetryableFailure, match=re.escape(f"{obj}: the storage failed to serve it")):
        with gcs.mapped(obj):
            raise RefreshError("503 backendError", retryable=True)


def test_a_storage_that_fails_to_serve_is_retryable(fake_client):
    from google.api_core import exceptions

    fake_client(exceptions.ServiceUnavailable("backend error"))
    with pytest.raises(StorageUnavailable, match=re.escape(URL)):
        storage.check_bucket(URL)


def test_no_credentials_at_all_is_a_usage_error_from_google_auth_itself(monkeypatch, tmp_path):
    """The real client and google-auth, with nothing to find: no key, no gcloud login, no metadata server (the
    probe is off and any attempt fails the test)."""
    from google.auth.compute_engine import _metadata

    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "GOOGLE_AUTH_TOKEN_FOR_TESTING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no application_default_credentials.json
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # read at import time

    def no_probe(*args, **kwargs):
        pytest.fail("the metadata server was probed")

    monkeypatch.setattr(_metadata, "ping", no_probe)
    monkeypatch.setattr(gcs, "_clients", {})
    with pytest.raises(StorageUsageError, match=pattern(ERR_NO_CREDENTIALS)) as caught:
        storage.check_bucket(URL)
    assert str(caught.value).startswith(f"{URL}: no Google Cloud credentials were found")


@pytest.fixture
def absent_bucket(monkeypatch, tmp_path):
    """A cluster file whose model_dir is in a bucket that does not exist, from a fresh directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    bucket = memory_bucket.install(monkeypatch)
    bucket.absent.add("bk1")
    (tmp_path / "c.yaml").write_text(YAML % URL)
    return bucket


def one_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("estimator-mnist: error: "), lines
    return lines[0]


def no_apply(monkeypatch):
    """train applies its plan (cores, umask, env) to this process first: not to the test's."""
    from estimator_mnist.plan import task_plan

    monkeypatch.setattr(task_plan, "apply_to_this_process", lambda plan: "unchanged")


def test_launch_refuses_a_missing_bucket_before_anything_starts(absent_bucket, tmp_path, capsys):
    assert cli.main(["launch", "--cluster", "c.yaml"]) == 2
    assert "the bucket gs://bk1 does not exist" in one_error(capsys)
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"] and absent_bucket.objects == {}  # no runs/, no records


def test_train_refuses_a_missing_bucket_before_its_task_starts(absent_bucket, tmp_path, monkeypatch, capsys):
    no_apply(monkeypatch)
    assert cli.main(["train", "--cluster", "c.yaml", "--task", "worker:0"]) == 2
    assert "the bucket gs://bk1 does not exist" in one_error(capsys)
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"] and absent_bucket.objects == {}


def test_train_under_kubeflow_s_tf_config_refuses_a_missing_bucket(absent_bucket, tmp_path, monkeypatch, capsys):
    no_apply(monkeypatch)
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"chief": ["j-chief-0.default.svc:2222"], "worker": '
                                    '["j-worker-0.default.svc:2222"]}, "task": {"type": "worker", "index": 0}, '
                                    '"environment": "cloud"}')
    (tmp_path / "c.yaml").write_text(f"model_dir: {URL}\n")  # the cluster is TF_CONFIG's
    assert cli.main(["train", "--cluster", "c.yaml"]) == 2
    assert "the bucket gs://bk1 does not exist" in one_error(capsys)
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"] and absent_bucket.objects == {}


def test_slurm_refuses_a_missing_bucket_and_prints_no_script(absent_bucket, capsys):
    assert cli.main(["slurm", "--cluster", "c.yaml"]) == 2
    assert "the bucket gs://bk1 does not exist" in one_error(capsys)
    assert capsys.readouterr().out == ""


def test_access_refused_at_preflight_is_exit_1_naming_the_bucket(absent_bucket, tmp_path, capsys):
    absent_bucket.absent.clear()
    absent_bucket.denied.add(URL)
    assert cli.main(["launch", "--cluster", "c.yaml"]) == 1
    assert f"{URL}: the storage refused access" in one_error(capsys)
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"]


def test_validate_makes_no_network_call_and_says_what_it_cannot_check(absent_bucket, monkeypatch, capsys):
    def no_call(path):
        pytest.fail("validate contacted the storage")

    monkeypatch.setattr(storage, "check_bucket", no_call)
    assert cli.main(["validate", "--cluster", "c.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("c.yaml: ok") and out[1:] == [commands.NOTE_OFFLINE.format(file="c.yaml", url=URL)]


def test_validate_of_a_local_model_dir_says_nothing_more(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(YAML % "model")
    assert cli.main(["validate", "--cluster", "c.yaml"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
