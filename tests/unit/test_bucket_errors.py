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
