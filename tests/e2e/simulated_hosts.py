"""Two simulated hosts for the multi-host tests: network namespaces joined by a veth pair.

Host a is 192.0.2.1 and host b is 192.0.2.2 (TEST-NET-1, reserved for
documentation and tests); the addresses exist only inside the namespaces the
test creates and deletes. Tasks are started by hand, `estimator-mnist train
--cluster FILE --task T` inside a host's namespace, as on real machines.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ADDRESSES = {"a": "192.0.2.1", "b": "192.0.2.2"}
SKIP_REASON = "network namespaces need root and iproute2 ('ip'); in CI this is a failure, not a skip"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def can_make_namespaces() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def require_namespaces() -> None:
    """Skips a test that needs network namespaces where they cannot be made; in CI that is a failure."""
    import pytest  # pylint: disable=import-outside-toplevel

    if not can_make_namespaces():
        if os.environ.get("CI"):
            pytest.fail(SKIP_REASON)
        pytest.skip(SKIP_REASON)


def kill_groups(processes: List[subprocess.Popen]) -> None:
    """SIGKILLs the process group of every process still running, and reaps it."""
    for proc in processes:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


class SimulatedHosts:
    def __init__(self, tag: str):
        self.ns = {host: f"em{host}{tag}" for host in ADDRESSES}
        self.veth = {host: f"ve{host}{tag}" for host in ADDRESSES}
        self.processes: List[subprocess.Popen] = []
        for host, ns in self.ns.items():
            _ip("netns", "add", ns)
        _ip("link", "add", self.veth["a"], "type", "veth", "peer", "name", self.veth["b"])
        for host, address in ADDRESSES.items():
            ns, veth = self.ns[host], self.veth[host]
            _ip("link", "set", veth, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", veth)
            _ip("-n", ns, "link", "set", veth, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def link(self, host: str, up: bool) -> None:
        """Takes a host's network link down (or up again), as a cable pulled or a host gone."""
        _ip("-n", self.ns[host], "link", "set", self.veth[host], "up" if up else "down")

    def start(self, host: str, args: List[str], log: Path) -> subprocess.Popen:
        """Runs `estimator-mnist ARGS` on `host`, its output in `log`."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.ns[host], sys.executable, "-m", "estimator_mnist",
                                     *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(proc)
        return proc

    def wait_all(self, procs: Dict[str, subprocess.Popen], timeout: float) -> Dict[str, float]:
        """Seconds at which each process exited (from now); fails the ones still running at the deadline."""
        started, ended = time.monotonic(), {}
        while len(ended) < len(procs) and time.monotonic() - started < timeout:
            for name, proc in procs.items():
                if name not in ended and proc.poll() is not None:
                    ended[name] = time.monotonic() - started
            time.sleep(0.2)
        return ended

    def close(self) -> None:
        kill_groups(self.processes)
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)  # deletes its veth too
