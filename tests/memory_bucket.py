"""A bucket in memory, with GCS's semantics as the storage layer relies on them (whole-object writes, generations,
`if_generation_match`, prefixes as directories, rename as copy-then-delete), for unit tests of code that keeps
records in a gs:// model_dir. The real client against a real GCS API server is tested in tests/process and
tests/e2e (tests/gcs_server.py); this stand-in is the storage layer's interface, not Google's."""

from __future__ import annotations

import errno
import threading
from typing import Dict, List, Optional, Tuple

from estimator_mnist import storage
from estimator_mnist.storage.errors import ERR_NO_BUCKET, StorageDenied, StorageUnavailable, StorageUsageError


class MemoryBucketStore:
    name = "memory"
    atomic_move = False
    flock = False

    def __init__(self):
        self.objects: Dict[str, Tuple[bytes, int]] = {}  # url -> (bytes, generation)
        self.denied: set = set()  # urls whose access is refused
        self.failing: Dict[str, int] = {}  # url -> how many more operations fail as unavailable
        self.absent: set = set()  # bucket names that do not exist (check_bucket's preflight refuses them)
        self._lock = threading.Lock()
        self._generation = 0

    def _check(self, path: str) -> None:
        if path in self.denied:
            raise StorageDenied(f"{path}: the storage refused access (403)")
        if self.failing.get(path):
            self.failing[path] -= 1
            raise StorageUnavailable(f"{path}: the storage failed to serve it (503)")

    def check_bucket(self, path: str) -> None:
        bucket = path[len("gs://"):].split("/")[0]
        if bucket in self.absent:
            raise StorageUsageError(ERR_NO_BUCKET.format(path=path, bucket=bucket))
        self._check(path)

    def read_versioned(self, path: str) -> Tuple[Optional[bytes], int]:
        self._check(path)
        return self.objects.get(path, (None, 0))

    def read_bytes(self, path: str) -> bytes:
        data, _ = self.read_versioned(path)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "No such object", path)
        return data

    def write_if_version(self, path: str, data: bytes, version: int,
                         request_secs: Optional[float] = None) -> Optional[int]:
        del request_secs  # answered at once
        self._check(path)
        with self._lock:
            if self.objects.get(path, (None, 0))[1] != version:
                return None
            self._generation += 1
            self.objects[path] = (bytes(data), self._generation)
            return self._generation

    def write_atomic(self, path: str, data: bytes, durable: bool = False) -> None:
        self._check(path)
        with self._lock:
            self._generation += 1
            self.objects[path] = (bytes(data), self._generation)

    def append(self, path: str, data: bytes) -> None:
        while True:
            old, version = self.read_versioned(path)
            if self.write_if_version(path, (old or b"") + data, version) is not None:
                return

    def walk_files(self, path: str) -> List[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(url for url in self.objects if url.startswith(prefix))

    def listdir(self, path: str) -> List[str]:
        self._check(path)
        prefix = path.rstrip("/") + "/"
        names = {url[len(prefix):].split("/")[0] for url in self.objects if url.startswith(prefix)}
        return sorted(name for name in names if name)  # a directory's own marker object ("…/") is no entry

    def exists(self, path: str) -> bool:
        return self.isfile(path) or self.isdir(path)

    def isfile(self, path: str) -> bool:
        self._check(path)  # a refused or failing stat is never "absent", as on the real stores
        return path in self.objects

    def isdir(self, path: str) -> bool:
        self._check(path)
        return bool(self.walk_files(path))

    def remove(self, path: str) -> None:
        self._check(path)
        if self.objects.pop(path, None) is None:
            raise FileNotFoundError(errno.ENOENT, "No such object", path)

    def rmtree(self, path: str) -> None:
        for url in self.walk_files(path):
            self.objects.pop(url, None)

    def makedirs(self, path: str) -> None:
        del path

    def move(self, src: str, dst: str) -> None:
        sources = [src] if src in self.objects else self.walk_files(src)
        if not sources:
            raise FileNotFoundError(errno.ENOENT, "No such object", src)
        for url in sources:
            self.write_atomic(dst + url[len(src):], self.read_bytes(url))
            self.remove(url)


def install(monkeypatch) -> MemoryBucketStore:
    """Makes every gs:// path of this test a path in a fresh memory bucket."""
    bucket = MemoryBucketStore()
    monkeypatch.setattr(storage, "_GCS", bucket)
    return bucket
