"""TensorFlow's own gs:// errors (tf_task/bucket_errors.py): a refused object exit 1, one TF gave up on after its
retries 200, each naming the object; errors about anything else left to the task's other handlers."""

import pytest
import tensorflow as tf

from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.tf_task.bucket_errors import ERR_TF_DENIED, bucket_failure

URL = "gs://bkt/run/model.ckpt-40.data-00000-of-00001"


@pytest.mark.parametrize("error", [tf.errors.AbortedError, tf.errors.UnavailableError,
                                   tf.errors.DeadlineExceededError])
def test_an_object_tf_gave_up_on_is_retryable_and_named(error):
    failure = bucket_failure("chief:0", error(None, None, f"All 10 retry attempts failed. The last failure: Error "
                                                          f"executing an HTTP request: HTTP response code 503 with "
                                                          f"body '...' when reading {URL}"))
    assert isinstance(failure, RetryableFailure)
    assert str(failure).startswith(f"task chief:0: {URL}: the storage failed to serve TensorFlow after its own retries")


def test_a_refused_object_is_permanent_and_named():
    message = f"Error executing an HTTP request: HTTP response code 403 with body 'denied' when initiating an upload to {URL}"
    failure = bucket_failure("worker:0", tf.errors.PermissionDeniedError(None, None, message))
    assert isinstance(failure, PermanentFailure)
    assert str(failure).startswith(ERR_TF_DENIED.split("{problem}")[0].format(task="worker:0", url=URL))


def test_errors_about_anything_but_a_bucket_are_left_alone():
    assert bucket_failure("chief:0", tf.errors.UnavailableError(None, None, "Socket closed from worker:0")) is None
    assert bucket_failure("chief:0", tf.errors.NotFoundError(None, None, f"{URL}; No such object")) is None


# TensorFlow 2.15 sends no token after its token request failed (a 503 or an invalid_grant alike): GCS answers 401,
# which TF reports as PermissionDeniedError (seen against the tests' proxy, tests/gcs_answers.py).
NO_TOKEN = tf.errors.PermissionDeniedError(None, None, "Error executing an HTTP request: HTTP response code 401 with "
                                                       f"body 'Anonymous caller' when initiating an upload to {URL}")


@pytest.mark.parametrize("answer", ["token now", "endpoint down"])
def test_tf_s_request_without_a_token_is_200_while_the_token_endpoint_fails_or_recovered(monkeypatch, answer):
    from estimator_mnist.storage.errors import StorageUnavailable
    from estimator_mnist.tf_task import bucket_errors

    asked = []

    def check_token(url):
        asked.append(url)
        if answer == "endpoint down":
            raise StorageUnavailable(f"{url}: the storage failed to serve it for 60 s (no access token: 503)")

    monkeypatch.setattr(bucket_errors, "check_token", check_token)
    failure = bucket_failure("chief:0", NO_TOKEN)
    assert isinstance(failure, RetryableFailure) and asked == [URL]
    assert str(failure).startswith(f"task chief:0: {URL}: TensorFlow's request went without an access token")


def test_tf_s_request_without_a_token_is_1_when_the_credentials_are_refused_for_good(monkeypatch):
    from estimator_mnist.storage.gcs import ERR_TOKEN_REFUSED, CredentialsRefused
    from estimator_mnist.tf_task import bucket_errors

    def check_token(url):
        raise CredentialsRefused(ERR_TOKEN_REFUSED.format(path=url, problem="invalid_grant: Invalid JWT Signature."))

    monkeypatch.setattr(bucket_errors, "check_token", check_token)
    failure = bucket_failure("worker:0", NO_TOKEN)
    assert isinstance(failure, PermanentFailure) and "\n" not in str(failure)
    assert str(failure).startswith(f"task worker:0: {URL}: TensorFlow's request had no token") and \
        "invalid_grant" in str(failure)
