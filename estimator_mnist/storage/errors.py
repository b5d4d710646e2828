"""What a storage operation's failure is, named once for disk and bucket alike. No TF.

The exit table (README.md) holds for a bucket as for a disk: access refused is permanent (exit 1, the
object named), a storage that fails to serve after the bounded retries is retryable (exit 200), a bucket that
does not exist or missing credentials are bad input (exit 2, before any task starts). Each is also an
OSError, so that code which tolerates an unreadable local file (a progress record being replaced) tolerates
it on a bucket too; a missing object is a plain FileNotFoundError on both.
"""

from __future__ import annotations

import errno

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


# A disk's errors, told apart once for every caller. Absent is ENOENT or ENOTDIR only (404 on a bucket): a stat
# or read that failed otherwise says nothing about whether the file is there. Refused is permanent (exit 1);
# a storage that failed to serve (an NFS server that did not answer, a stale handle, an I/O error) is retried
# within STORAGE_RETRY_SECS, then retryable (exit 200).
ABSENT_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR})
DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM})
TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.EAGAIN, errno.EINTR,
                              errno.ECONNRESET, errno.ECONNREFUSED, errno.EHOSTDOWN, errno.EHOSTUNREACH,
                              errno.ENETUNREACH, errno.ENETDOWN, errno.EREMOTEIO, errno.ENOLCK})


def is_absent(exc: BaseException) -> bool:
    """A confirmed absence: FileNotFoundError or NotADirectoryError (a bucket's 404 is a FileNotFoundError)."""
    return isinstance(exc, OSError) and not isinstance(exc, (StorageDenied, StorageUnavailable)) and \
        (isinstance(exc, FileNotFoundError) or exc.errno in ABSENT_ERRNOS)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, StorageUnavailable) or (isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS)


def named(exc: OSError, path: str, secs: float) -> OSError:
    """A disk's OSError as the layer names it: StorageDenied for a refusal, StorageUnavailable for a storage that
    failed to serve for `secs`, the OS's own error otherwise (absent, no space, exists: each its own class). The
    errno stays on the named error, for code that asks it (disk_full.py)."""
    if isinstance(exc, (StorageDenied, StorageUnavailable, StorageUsageError)):
        return exc
    if exc.errno in DENIED_ERRNOS:
        failure: OSError = StorageDenied(ERR_DENIED.format(path=path, problem=problem_text(exc)))
    elif exc.errno in TRANSIENT_ERRNOS:
        failure = StorageUnavailable(ERR_UNAVAILABLE.format(path=path, secs=secs, problem=problem_text(exc)))
    else:
        return exc
    failure.errno = exc.errno  # not its filename: OSError's str would then print the errno, not the line
    return failure
