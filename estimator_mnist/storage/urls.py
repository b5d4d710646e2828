"""Which storage a path names: a local path, a `gs://bucket/object` URL, or a scheme this product refuses. No TF.

TensorFlow names its file systems by URL scheme (gs://, s3://, hdfs://); this product reads and writes
`model_dir` through its storage layer (this package) on the local file system and on Google Cloud Storage,
and TensorFlow writes its own files there through its built-in `gs://` file system. Other schemes would
need a plugin that TF 2.15 does not ship working (tensorflow-io's s3:// aborts every process at exit,
tensorflow/io#1912), so they are refused in one line that names what works.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Optional, Tuple

from estimator_mnist.errors import UsageError

GS = "gs"
# scheme://... as TensorFlow's file systems name them: RFC 3986's scheme syntax.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
# A scheme and its colon without the '//' a URL has (gs:/bucket/x, gs:bucket/x, s3:/x): a mistyped URL, never
# meant as a local folder named "gs:" (that would train into ./gs:/bucket/x and never touch the bucket).
_ALMOST_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?P<after>.?)", re.DOTALL)
KNOWN_SCHEMES = frozenset({"gs", "gcs", "s3", "s3a", "hdfs", "http", "https", "file", "az", "abfs", "abfss", "wasb",
                           "wasbs", "ftp", "sftp", "ram", "oss", "viewfs"})
ERR_MALFORMED = ("{file}: {key} {path!r} looks like a URL but is not one ('{scheme}:' without '//'); write a bucket "
                 "as gs://BUCKET/PATH, or a local folder as ./{path} if that is what you mean")
# Google's bucket naming rules: 3-63 characters (222 with dots), lower-case letters, digits, '-', '_' and '.',
# beginning and ending with a letter or a digit.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
ERR_SCHEME = ("{file}: {key} {path!r} is a {scheme}:// URL, which this product does not read or write; give "
              "gs://BUCKET/PATH (Google Cloud Storage, through TensorFlow's own gs:// file system) or a path on "
              "the local or a shared POSIX file system")
ERR_BUCKET = ("{file}: {key} {path!r} does not name a bucket as gs://BUCKET/PATH does ({why}); write it as "
              "gs://my-bucket/runs/mnist")
ERR_LOCAL_ONLY = ("{file}: {key} {path!r} is a gs:// URL, but {key} is {why}; give a local path (model_dir is the "
                  "one directory that may be a bucket)")


def scheme_of(path: str) -> Optional[str]:
    match = _URL.match(path) if isinstance(path, str) else None
    return match["scheme"].lower() if match else None


def is_bucket(path) -> bool:
    """True for a gs:// URL (the only remote storage this product reads and writes)."""
    return scheme_of(str(path)) == GS


def split(path: str) -> Tuple[str, str]:
    """('bucket', 'object/name') of gs://bucket/object/name, the name exactly as given (a directory's marker
    object, which TensorFlow's gs:// makes, ends with '/')."""
    rest = _URL.match(path)["rest"]
    bucket, _, name = rest.partition("/")
    return bucket, name


def join(path, *parts: str) -> str:
    """os.path.join for local paths, '/'-joined names under a bucket URL."""
    path = str(path)
    if is_bucket(path):
        return posixpath.join(path.rstrip("/") or path, *parts) if parts else path
    return os.path.join(path, *parts)


def parent(path: str) -> str:
    if is_bucket(path):
        bucket, name = split(path)
        head = posixpath.dirname(name)
        return f"gs://{bucket}/{head}" if head else f"gs://{bucket}"
    return os.path.dirname(path)


def basename(path: str) -> str:
    return posixpath.basename(str(path).rstrip("/"))


def check_url(value: str, file: str, key: str, bucket_ok: bool = True, local_why: str = "") -> Optional[str]:
    """None for a local path; the normalised gs:// URL where `bucket_ok`; else one line (UsageError) naming the
    file, the key and what works instead. A string that looks like a URL but is none (gs:/b/x) is refused too."""
    scheme = scheme_of(value)
    if scheme is None:
        almost = _ALMOST_URL.match(value) if isinstance(value, str) else None
        if almost and (almost["after"] == "/" or almost["scheme"].lower() in KNOWN_SCHEMES):
            raise UsageError(ERR_MALFORMED.format(file=file, key=key, path=value, scheme=almost["scheme"]))
        return None
    if scheme != GS:
        raise UsageError(ERR_SCHEME.format(file=file, key=key, path=value, scheme=scheme))
    if not bucket_ok:
        raise UsageError(ERR_LOCAL_ONLY.format(file=file, key=key, path=value, why=local_why))
    bucket, name = split(value)
    name = name.rstrip("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        why = "no bucket" if not bucket else f"{bucket!r} is no valid bucket name"
        raise UsageError(ERR_BUCKET.format(file=file, key=key, path=value, why=why))
    if any(part in (".", "..") for part in name.split("/")) or "//" in name or "\x00" in name:
        raise UsageError(ERR_BUCKET.format(file=file, key=key, path=value, why="an empty, '.' or '..' part"))
    return f"gs://{bucket}/{name}" if name else f"gs://{bucket}"
