"""`estimator-mnist serve` for the process and e2e tests: started on free loopback ports (REST and gRPC), waited
for, stopped with Ctrl-C; and stand-in exports (random weights) and PNG digits, written by `python -m tests.serve_exports` in a
process of its own so that the test process needs no TensorFlow."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import requests

from tests.helpers import REPO, free_ports

READY = "the page: "
START_TIMEOUT_SECS = 120


class Server:
    def __init__(self, model: str, *extra: str):
        """`extra` flags come last, so they override these: no drain delay (no load balancer to wait for)."""
        self.port, self.grpc_port = free_ports(2)
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "estimator_mnist", "serve", "--model", str(model),
                                      "--port", str(self.port), "--grpc-port", str(self.grpc_port),
                                      "--drain-delay-secs", "0", *extra], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: List[str] = []
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"serve exited with {self.proc.wait()}: {''.join(self.lines)}")
            self.lines.append(line)
            if READY in line:
                return
        raise AssertionError(f"serve did not start within {START_TIMEOUT_SECS} s: {''.join(self.lines)}")

    def url(self, path: str) -> str:
        return self.base + path

    def predict(self, body, name: str = "mnist", **kwargs) -> requests.Response:
        return requests.post(self.url(f"/v1/models/{name}:predict"), json=body, timeout=60, **kwargs)

    def wait_for_version(self, version: int, timeout: float = 60, state: str = "AVAILABLE") -> dict:
        """The status once `version` is in `state` (AVAILABLE: the newest, served; END: unloaded, as Serving
        passes through UNLOADING while requests still hold it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = requests.get(self.url("/v1/models/mnist"), timeout=10)
            entries = status.json().get("model_version_status", []) if status.ok else []
            if any({"version": str(version), "state": state}.items() <= entry.items() for entry in entries):
                return status.json()
            time.sleep(0.2)
        raise AssertionError(f"version {version} did not reach {state} within {timeout} s")

    def stop(self, timeout: float = 60, signum: int = signal.SIGINT) -> int:
        """Ctrl-C, as a user stops it (or `signum`); its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
            try:
                rest, _ = self.proc.communicate(timeout=timeout)
                self.lines.append(rest)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def write_exports_and_digits(export_base: Path, exports: int, folder: Path, digits: int,
                             hang_first: bool = False) -> dict:
    """{"exports": [...], "files": [...]}: `exports` stand-in exports (random weights), each newer than the one
    before, in the product's format, and `digits` PNG files of drawn digits with digits.npy, the same digits as
    MNIST floats [N,28,28,1]; with `hang_first`, every model call of the first export hangs until it is unloaded.
    One process, so that TensorFlow starts once."""
    out = subprocess.run([sys.executable, "-m", "tests.serve_exports", str(export_base), str(exports), str(folder),
                          str(digits)] + (["--hang-first"] if hang_first else []), cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
