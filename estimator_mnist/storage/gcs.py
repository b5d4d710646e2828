"""The storage layer on Google Cloud Storage, through Google's own client (google-cloud-storage). No TF.

An object is written whole or not at all, so every write is an atomic replace. What needs a lock or a
compare-and-swap uses the bucket's generation: a create-if-absent (`if_generation_match=0`) or an overwrite of
the generation that was read, which the server refuses (412) when another writer came first. A conditional
delete is never relied on (fake-gcs-server, the suite's real GCS API server, ignores it, so such a test would
pass for nothing). A rename is a copy then a delete, as TensorFlow's gs:// file system does too.

Errors are told apart as on a disk (errors.py): 403/401 refuse access (exit 1, the object named); 5xx, 429,
time-outs and lost connections are retried with backoff for STORAGE_RETRY_SECS (bounds.py), then
exit 200 naming the object; a missing object is FileNotFoundError. A token the credentials cannot get is told
apart by google-auth's own predicate (RefreshError.retryable): retryable (the token endpoint's 5xx) is retried
as a 503 is, then exit 200; not retryable (invalid_grant: a key revoked or deleted) is exit 1 naming the object,
exit 2 before any task starts. Credentials are Google's default ones
(GOOGLE_APPLICATION_CREDENTIALS, gcloud's, GKE's Workload Identity); with STORAGE_EMULATOR_HOST set the client
talks to that server anonymously. The client is imported on first use only (about 0.3 s).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import warnings
from typing import List, Optional, Tuple

from estimator_mnist.storage.bounds import STORAGE_REQUEST_SECS, STORAGE_RETRY_SECS
from estimator_mnist.storage.gcs_retry import bounded_retry
from estimator_mnist.storage.errors import (ERR_DENIED, ERR_NO_BUCKET, ERR_NO_CREDENTIALS, ERR_UNAVAILABLE,
                                            StorageDenied, StorageUnavailable, StorageUsageError, problem_text)
from estimator_mnist.storage.urls import split

RETRY_SECS, REQUEST_SECS = STORAGE_RETRY_SECS, STORAGE_REQUEST_SECS
TOKEN_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
NO_TOKEN = "no access token: the token endpoint failed ({problem})"
ERR_TOKEN_REFUSED = ("{path}: the token endpoint refused this job's credentials ({problem}): the service account key "
                     "was revoked or deleted, or the account disabled; give the job valid credentials "
                     "(GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, Workload Identity), "
                     "then start it again")
_client_lock = threading.Lock()
_clients = {}  # pid -> client: a forked child makes its own (the client's HTTP session is not fork-safe)


def _import_storage():
    # google.api_core warns on import that Python 3.11's support ends in 2027 (a FutureWarning): not the
    # user's concern, and it must not reach a one-line error.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        from google.cloud import storage  # pylint: disable=import-outside-toplevel
        from google.api_core import exceptions  # pylint: disable=import-outside-toplevel
        from google.cloud.storage.retry import _should_retry  # pylint: disable=import-outside-toplevel
    return storage, exceptions, _should_retry


def client(path: str = "gs://"):
    """This process's client (made on first use); `path` names what needed it in the error of missing
    credentials."""
    with _client_lock:
        made = _clients.get(os.getpid())
        if made is None:
            storage, _, _ = _import_storage()
            import google.auth.exceptions as auth_errors  # pylint: disable=import-outside-toplevel
            try:
                # A project only names where new buckets go; this product lists and writes objects only.
                made = storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or "<none>")
            except auth_errors.DefaultCredentialsError as exc:
                raise StorageUsageError(ERR_NO_CREDENTIALS.format(path=path, problem=problem_text(exc))) from None
            _clients[os.getpid()] = made
        return made


def check_token(path: str) -> None:
    """Gets an access token with this process's credentials, as TensorFlow's own client gets one for itself:
    returns once one is had (a retryable failure asked again within the storage bound). A token endpoint that
    refuses the credentials: CredentialsRefused (exit 1); one that keeps failing: StorageUnavailable (exit 200);
    no credentials: StorageUsageError; each naming `path`."""
    _import_storage()
    import google.auth  # pylint: disable=import-outside-toplevel
    import google.auth.transport.requests  # pylint: disable=import-outside-toplevel
    with mapped(path):
        credentials, _ = google.auth.default(scopes=[TOKEN_SCOPE])
        _retry()(credentials.refresh)(google.auth.transport.requests.Request())


def _retry(deadline: Optional[float] = None):
    """The layer's retry: GCS's own predicate (5xx, 429, lost connections), and a token the credentials could
    not get for a reason google-auth calls retryable (RefreshError.retryable: the token endpoint's 5xx, which
    google-auth itself tried 3 times over about 3 s), for RETRY_SECS or `deadline`."""
    _, _, should_retry = _import_storage()
    import google.auth.exceptions as auth_errors  # pylint: disable=import-outside-toplevel

    def predicate(exc: BaseException) -> bool:
        return should_retry(exc) or (isinstance(exc, auth_errors.RefreshError) and exc.retryable)

    return bounded_retry(predicate, RETRY_SECS if deadline is None else deadline)


def _refresh_text(exc: BaseException) -> str:
    """A RefreshError's own words: its first argument ("invalid_grant: Invalid JWT Signature."), not the tuple of
    it and the endpoint's whole answer that str() gives."""
    first = exc.args[0] if exc.args else exc
    return problem_text(first if isinstance(first, BaseException) else Exception(first))


class CredentialsRefused(StorageDenied):
    """The token endpoint refused the credentials for good (RefreshError, not retryable: invalid_grant, a revoked
    or deleted key): exit 1 naming the object mid-run; exit 2 before any task starts (check_bucket)."""


@contextlib.contextmanager
def mapped(path: str, writing: bool = False, secs: Optional[float] = None):
    """Google's exceptions as the layer's (errors.py); `secs`: the retry bound the request had."""
    _, exceptions, _ = _import_storage()
    import google.auth.exceptions as auth_errors  # pylint: disable=import-outside-toplevel
    import requests  # pylint: disable=import-outside-toplevel
    try:
        yield
    except exceptions.NotFound as exc:
        if writing:  # a write to a missing object creates it: only the bucket can be missing
            raise StorageUsageError(ERR_NO_BUCKET.format(path=path, bucket=split(path)[0])) from None
        raise FileNotFoundError(errno.ENOENT, problem_text(exc), path) from None
    except (exceptions.Forbidden, exceptions.Unauthorized) as exc:
        raise StorageDenied(ERR_DENIED.format(path=path, problem=problem_text(exc))) from None
    except auth_errors.DefaultCredentialsError as exc:
        raise StorageUsageError(ERR_NO_CREDENTIALS.format(path=path, problem=problem_text(exc))) from None
    except auth_errors.RefreshError as exc:
        if not exc.retryable:
            raise CredentialsRefused(ERR_TOKEN_REFUSED.format(path=path, problem=_refresh_text(exc))) from None
        raise StorageUnavailable(ERR_UNAVAILABLE.format(path=path, secs=secs or RETRY_SECS, problem=NO_TOKEN.format(
            problem=_refresh_text(exc)))) from None
    except (exceptions.RetryError, exceptions.ServerError, exceptions.TooManyRequests,
            requests.exceptions.RequestException, auth_errors.TransportError) as exc:
        cause = exc.cause if isinstance(exc, exceptions.RetryError) and exc.cause is not None else exc
        problem = problem_text(cause)
        if isinstance(cause, auth_errors.RefreshError):
            problem = NO_TOKEN.format(problem=_refresh_text(cause))
        raise StorageUnavailable(ERR_UNAVAILABLE.format(path=path, secs=secs or RETRY_SECS, problem=problem)) from None


class GcsStore:
    """Every operation of the layer on a gs:// URL. Directories are name prefixes: they need no making."""

    name = "gcs"
    atomic_move = False  # a rename is a copy then a delete, object by object
    flock = False  # objects take no flock(2): the lease is the only lock on a bucket

    @staticmethod
    def _blob(path: str):
        bucket, name = split(path)
        return client().bucket(bucket).blob(name)

    def read_bytes(self, path: str) -> bytes:
        return self.read_versioned(path, missing_ok=False)[0]

    def check_bucket(self, path: str) -> None:
        """Preflight, before any task starts: the bucket of `path` exists and this process has credentials that may
        list it. It lists at most one object under the URL's prefix rather than reading the bucket's metadata
        (storage.buckets.get), which roles/storage.objectAdmin, enough for everything else, does not grant.
        No bucket, no credentials or credentials the token endpoint refuses (not retryable): StorageUsageError (exit
        2); access refused: StorageDenied naming the URL (exit 1); a storage, or a token endpoint, that fails to
        serve past the retries: StorageUnavailable (exit 200)."""
        _, exceptions, _ = _import_storage()
        bucket, name = split(path)
        try:
            with mapped(path):
                try:
                    pages = client(path).list_blobs(bucket, prefix=f"{name}/" if name else "", max_results=1,
                                                   timeout=REQUEST_SECS, retry=_retry())
                    any(True for _ in pages)
                except exceptions.NotFound:
                    raise StorageUsageError(ERR_NO_BUCKET.format(path=path, bucket=bucket)) from None
        except CredentialsRefused as exc:  # a key revoked, a Workload Identity binding missing: bad input, exit 2
            raise StorageUsageError(str(exc)) from None

    def write_atomic(self, path: str, data: bytes, durable: bool = False) -> None:
        del durable  # an object is durable once the upload is answered
        with mapped(path, writing=True):
            self._blob(path).upload_from_string(data, content_type="application/octet-stream",
                                                timeout=REQUEST_SECS, retry=_retry())

    def append(self, path: str, data: bytes) -> None:
        """Objects cannot be appended to: the object is rewritten with the data at its end, generation-matched
        so that two appenders never lose each other's lines."""
        while True:
            old, version = self.read_versioned(path)
            if self.write_if_version(path, (old or b"") + data, version) is not None:
                return

    @staticmethod
    def _prefix(path: str) -> Tuple[str, str]:
        """(bucket, the prefix of every object below `path` as a directory)."""
        bucket, name = split(path)
        return bucket, f"{name.rstrip('/')}/" if name.rstrip("/") else ""

    def _list(self, path: str, delimiter: Optional[str]):
        bucket, prefix = self._prefix(path)
        with mapped(path):
            pages = client().list_blobs(bucket, prefix=prefix, delimiter=delimiter, timeout=REQUEST_SECS,
                                        retry=_retry())
            blobs = list(pages)
            return prefix, blobs, sorted(pages.prefixes)

    def exists(self, path: str) -> bool:
        return self.isfile(path) or self.isdir(path)

    def isfile(self, path: str) -> bool:
        with mapped(path):
            return split(path)[1] != "" and self._blob(path).exists(timeout=REQUEST_SECS, retry=_retry())

    def isdir(self, path: str) -> bool:
        bucket, prefix = self._prefix(path)
        with mapped(path):
            pages = client().list_blobs(bucket, prefix=prefix, max_results=1, timeout=REQUEST_SECS, retry=_retry())
            return any(True for _ in pages)

    def listdir(self, path: str) -> List[str]:
        """The names directly below `path` (objects and 'directories'); [] when there are none."""
        prefix, blobs, prefixes = self._list(path, "/")
        names = {b.name[len(prefix):] for b in blobs} | {p[len(prefix):].rstrip("/") for p in prefixes}
        return sorted(n for n in names if n)

    def walk_files(self, path: str) -> List[str]:
        """Every object's URL below `path`."""
        bucket = split(path)[0]
        _, blobs, _ = self._list(path, None)
        return [f"gs://{bucket}/{b.name}" for b in blobs]

    def remove(self, path: str) -> None:
        with mapped(path):
            self._blob(path).delete(timeout=REQUEST_SECS, retry=_retry())

    def rmtree(self, path: str) -> None:
        for url in self.walk_files(path):
            with contextlib.suppress(FileNotFoundError):
                self.remove(url)

    def makedirs(self, path: str) -> None:
        del path

    def move(self, src: str, dst: str) -> None:
        """Copy then delete, object by object (a 'directory' moves as all its objects): not atomic, as on GCS
        itself; a copy left by a stop half-way is found again under its new name."""
        sources = self.walk_files(src) if not self.isfile(src) else [src]
        if not sources:
            raise FileNotFoundError(errno.ENOENT, "no such object", src)
        for url in sources:
            target = dst + url[len(src):]
            (sb, sn), (db, dn) = split(url), split(target)
            with mapped(url):
                source_bucket = client().bucket(sb)
                source_bucket.copy_blob(source_bucket.blob(sn), client().bucket(db), dn, timeout=REQUEST_SECS,
                                        retry=_retry())
            self.remove(url)

    def read_versioned(self, path: str, missing_ok: bool = True) -> Tuple[Optional[bytes], int]:
        """The object's bytes and generation; (None, 0) when it does not exist."""
        blob = self._blob(path)
        try:
            with mapped(path):
                data = blob.download_as_bytes(timeout=REQUEST_SECS, retry=_retry())
        except FileNotFoundError:
            if missing_ok:
                return None, 0
            raise
        return data, int(blob.generation or 0)

    def write_if_version(self, path: str, data: bytes, version: int,
                         request_secs: Optional[float] = None) -> Optional[int]:
        """Writes the object if its generation is still `version` (0: if it does not exist): the new
        generation, else None (another writer was first). `request_secs` bounds the whole write, retries
        included (a lease's heartbeat), instead of REQUEST_SECS each and RETRY_SECS in all."""
        _, exceptions, _ = _import_storage()
        blob = self._blob(path)
        try:
            with mapped(path, writing=True, secs=request_secs):
                blob.upload_from_string(data, content_type="application/octet-stream", if_generation_match=version,
                                        timeout=request_secs or REQUEST_SECS, retry=_retry(request_secs))
        except exceptions.PreconditionFailed:
            # A retried upload whose first attempt was applied but not answered finds its own bytes there.
            now, generation = self.read_versioned(path)
            return generation if now == data and generation else None
        return int(blob.generation)
