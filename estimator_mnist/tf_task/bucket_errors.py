"""A TensorFlow error from its own gs:// file system (a checkpoint, an event file, an export) named as what it is.
Imports TensorFlow.

TF 2.15's gs:// file system retries 429 and 5xx by its own settings (10 retries, 1 s doubling to 32 s:
docs/storage.md), then raises AbortedError ("All 10 retry attempts failed"); a refused object is
PermissionDeniedError at once. Left to the task's other handlers, the first read as a lost cluster ("task
chief:0 lost its cluster: AbortedError") and the second as a traceback. Told apart by the gs:// URL TF names
in the message, they follow the exit table as the storage layer's own errors do: refused 1, unserved 200.
A 401 is TF's request without a token (its token request failed): told apart as the storage layer tells its
own token failures apart (google-auth's RefreshError.retryable): a key refused for good 1, a passing failure 200.
"""

from __future__ import annotations

import re
from typing import Optional

import tensorflow as tf

from estimator_mnist.errors import RETRYABLE_NOTE, PermanentFailure, RetryableFailure
from estimator_mnist.storage.errors import StorageUnavailable, StorageUsageError, problem_text
from estimator_mnist.storage.gcs import CredentialsRefused, check_token

ERR_TF_DENIED = ("task {task}: {url}: the storage refused TensorFlow access ({problem}); give this job's account "
                 "read and write access to the bucket (roles/storage.objectAdmin), then start the job again")
ERR_TF_UNAVAILABLE = ("task {task}: {url}: the storage failed to serve TensorFlow after its own retries "
                      "({problem}); {note}")
ERR_TF_NO_TOKEN = ("task {task}: {url}: TensorFlow's request went without an access token and was refused (401): "
                   "{problem}; {note}")
UNAUTHENTICATED = "HTTP response code 401"
_URL = re.compile(r"gs://[^\s'\",;)\]]+")
UNSERVED = (tf.errors.AbortedError, tf.errors.UnavailableError, tf.errors.DeadlineExceededError)


def _token_failure(task: str, url: str, problem: str) -> Exception:
    """A 401 on TensorFlow's request: TF 2.15 sends no token after its token request failed (GetToken answers an
    empty token, tsl/platform/cloud/google_auth_provider.cc), whatever the reason. The storage layer asks for a
    token with the same credentials, through google-auth's predicate (gcs.check_token): refused for good (a
    revoked key) is exit 1 naming the object; a token endpoint failing or already well again is exit 200, since
    a restart gets TF a token."""
    try:
        check_token(url)
    except (StorageUnavailable, StorageUsageError, CredentialsRefused) as exc:
        if isinstance(exc, StorageUnavailable):
            return RetryableFailure(ERR_TF_NO_TOKEN.format(task=task, url=url, problem=problem_text(exc),
                                                           note=RETRYABLE_NOTE))
        return PermanentFailure(f"task {task}: {url}: TensorFlow's request had no token ({problem}); {exc}")
    return RetryableFailure(ERR_TF_NO_TOKEN.format(task=task, url=url, note=RETRYABLE_NOTE,
                                                   problem="its token endpoint failed; it answers again now"))


def bucket_failure(task: str, exc: tf.errors.OpError) -> Optional[Exception]:
    """The one-line failure for a TF error about a gs:// object, or None for any other error."""
    match = _URL.search(exc.message or "")
    if match is None:
        return None
    problem = " ".join(exc.message.split())[:200]
    if isinstance(exc, tf.errors.PermissionDeniedError) and UNAUTHENTICATED in exc.message:
        return _token_failure(task, match[0], problem)
    if isinstance(exc, (tf.errors.PermissionDeniedError, tf.errors.UnauthenticatedError)):
        return PermanentFailure(ERR_TF_DENIED.format(task=task, url=match[0], problem=problem))
    if isinstance(exc, UNSERVED):
        return RetryableFailure(ERR_TF_UNAVAILABLE.format(task=task, url=match[0], problem=problem,
                                                          note=RETRYABLE_NOTE))
    return None
