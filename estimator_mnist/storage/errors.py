"""What a storage operation's failure is, named once for disk and bucket alike. No TF.

The exit table (README.md) holds for a bucket as for a disk: access refused is permanent (exit 1, the
object named), a storage that fails to serve after the bounded retries is retryable (exit 200), a bucket that
does not exist or missing credentials are bad input (exit 2, before any task starts). Each is also an
OSError, so that code which tolerates an unreadable local file (a progress record being replaced) tolerates
it on a bucket too; a missing object is a plain FileNotFoundError on both.
"""

from __future__ import annotations

from estimator_mnist.errors import PermanentFailure, RetryableFailure, UsageError

ERR_DENIED = ("{path}: the storage refused access ({problem}); give this job's account read and write access to "
              "it (for a bucket: roles/storage.objectAdmin on the bucket), then start the job again")
ERR_UNAVAILABLE = ("{path}: the storage failed to serve it for {secs:.0f} s ({problem}); exiting with 200 "
                   "(retryable) so that a restart tries again")
ERR_NO_BUCKET = ("{path}: the bucket gs://{bucket} does not exist (or this account cannot see it); create it "
                 "(gcloud storage buckets create gs://{bucket}) or fix model_dir")
ERR_NO_CREDENTIALS = ("{path}: no Google Cloud credentials were found ({problem}); set "
                      "GOOGLE_APPLICATION_CREDENTIALS to a service account key file, run `gcloud auth "
                      "application-default login`, or run on GKE with Workload Identity")


class StorageDenied(PermanentFailure, PermissionError):
    """Access refused: exit 1 naming the object."""


class StorageUnavailable(RetryableFailure, OSError):
    """Failed to serve after the bounded retries (5xx, 429, time-outs, lost connections): exit 200."""


class StorageUsageError(UsageError, OSError):
    """A bucket that does not exist, or no credentials: exit 2 before any task starts."""


def problem_text(exc: BaseException, limit: int = 160) -> str:
    """One line of at most `limit` characters saying what an exception says."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return " ".join(text.split())[:limit] or type(exc).__name__
