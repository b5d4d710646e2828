"""The storage layer's bucket store (storage/gcs.py) against a real GCS API server (fake-gcs-server) through the
tests' proxy: each operation, the compare-and-swap and the lease on a bucket, and each failure named as the exit
table says (denied 1, unavailable after the bounded retries 200, a missing bucket 2), with faults the proxy
injects. No mock of google-cloud-storage."""

from __future__ import annotations

import threading
import time

import pytest

from estimator_mnist import storage
from estimator_mnist.errors import PermanentFailure, RetryableFailure, UsageError
from estimator_mnist.storage import gcs, lock
from estimator_mnist.storage.errors import StorageDenied, StorageUnavailable, StorageUsageError


@pytest.fixture
def bucket(gcs_bucket, gcs_env, monkeypatch):
    for key, value in gcs_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(gcs, "_clients", {})  # a client made with this test's environment
    # Retries as in production (backoff from 0.5 s) but bounded at 4 s, not STORAGE_RETRY_SECS.
    monkeypatch.setattr(gcs, "RETRY_SECS", 4.0)
    return f"gs://{gcs_bucket}"


def test_records_are_written_whole_read_listed_moved_and_removed(bucket):
    run = storage.join(bucket, "run", "model")
    storage.write_json(storage.join(run, "progress", "chief-0.json"), {"task": "chief:0", "step": 1})
    storage.write_atomic(storage.join(run, "checkpoint"), 'model_checkpoint_path: "model.ckpt-5"\n')
    assert storage.read_json(storage.join(run, "progress", "chief-0.json")) == {"task": "chief:0", "step": 1}
    assert storage.read_json(storage.join(run, "missing.json")) is None
    assert storage.listdir(run) == ["checkpoint", "progress"]
    assert storage.listdir(storage.join(bucket, "nothing")) == []
    assert storage.isdir(storage.join(run, "progress")) and storage.isfile(storage.join(run, "checkpoint"))
    assert not storage.exists(storage.join(run, "absent"))
    storage.append_line(storage.join(run, "eval_results.jsonl"), '{"step": 5}')
    storage.append_line(storage.join(run, "eval_results.jsonl"), '{"step": 10}')
    assert storage.read_text(storage.join(run, "eval_results.jsonl")) == '{"step": 5}\n{"step": 10}\n'
    storage.move(storage.join(run, "progress"), storage.join(run, "damaged", "progress"))
    assert storage.listdir(storage.join(run, "damaged", "progress")) == ["chief-0.json"]
    assert not storage.isdir(storage.join(run, "progress"))
    storage.rmtree(storage.join(run, "damaged"))
    storage.remove(storage.join(run, "checkpoint"))
    assert storage.listdir(run) == ["eval_results.jsonl"]


def test_a_versioned_record_on_a_bucket_has_one_winner_per_generation(bucket):
    path = storage.join(bucket, "lease")
    assert storage.read_versioned(path) == (None, 0)
    first = storage.write_if_version(path, b"a", 0)
    assert first and storage.write_if_version(path, b"b", 0) is None
    assert storage.read_versioned(path) == (b"a", first)
    second = storage.write_if_version(path, b"c", first)
    assert second and storage.write_if_version(path, b"d", first) is None
    assert storage.read_versioned(path) == (b"c", second)


def test_two_threads_take_a_bucket_lease_one_at_a_time(bucket):
    path, inside, most = storage.join(bucket, "sweep.lock"), [], []

    def task():
        with lock.exclusive(path, print):
            inside.append(1)
            most.append(len(inside))
            time.sleep(0.2)
            inside.pop()

    threads = [threading.Thread(target=task) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == [1, 1, 1]
    data, _ = storage.read_versioned(path + lock.LEASE_SUFFIX)
    assert b'"holder": null' in data


def test_503s_are_retried_with_backoff_and_the_write_lands(bucket, gcs_server):
    fault = gcs_server.proxy.inject(503, times=3, name="retried.json")
    storage.write_json(storage.join(bucket, "retried.json"), {"a": 1})
    assert fault.hits == 3 and storage.read_json(storage.join(bucket, "retried.json")) == {"a": 1}


def test_a_storage_that_keeps_failing_is_unavailable_naming_the_object_exit_200(bucket, gcs_server):
    gcs_server.proxy.inject(503, times=1000, name="down.json")
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as error:
        storage.read_json(storage.join(bucket, "down.json"))
    assert 3.9 < time.monotonic() - started < 30  # retried for the whole bound it names (gcs_retry.py)
    assert isinstance(error.value, RetryableFailure) and isinstance(error.value, OSError)
    assert str(error.value).startswith(f"{bucket}/down.json: the storage failed to serve it for 4 s (")
    gcs_server.proxy.reset()


def test_a_denied_object_is_exit_1_naming_it_and_never_retried(bucket, gcs_server):
    fault = gcs_server.proxy.inject(403, times=1000, name="secret.json")
    with pytest.raises(StorageDenied) as error:
        storage.write_json(storage.join(bucket, "secret.json"), {"a": 1})
    assert fault.hits == 1 and isinstance(error.value, PermanentFailure) and isinstance(error.value, PermissionError)
    assert str(error.value).startswith(f"{bucket}/secret.json: the storage refused access (")
    gcs_server.proxy.reset()


def test_a_write_to_a_bucket_that_does_not_exist_is_bad_input(bucket):
    with pytest.raises(StorageUsageError) as error:
        storage.write_json("gs://no-such-bucket-here/run/x.json", {"a": 1})
    assert isinstance(error.value, UsageError)
    assert "the bucket gs://no-such-bucket-here does not exist" in str(error.value)
