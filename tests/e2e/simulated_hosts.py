"""Two simulated hosts for the multi-host tests: network namespaces joined by a veth pair, or by a degraded link.

Host a is 192.0.2.1 and host b is 192.0.2.2 (TEST-NET-1, reserved for
documentation and tests); the addresses exist only inside the namespaces the
test creates and deletes. Tasks are started by hand, `estimator-mnist train
--cluster FILE --task T` inside a host's namespace, as on real machines.

With `Netem(delay_ms, loss)` the hosts get a TAP device each instead of the veth pair, joined by
netem_link.py, this kernel's stand-in for `tc netem delay D loss P` (it has no sch_netem). Its MTU is
large (TAP_MTU): the stand-in moves each frame in Python, and with TCP segmentation offload a veth
under netem carries (and netem drops) segments of up to 64 KiB too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

ADDRESSES = {"a": "192.0.2.1", "b": "192.0.2.2"}
TAP_MTU = 65000
_REPO = Path(__file__).resolve().parents[2]  # where `python -m tests.e2e...` finds the helpers
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


@dataclass(frozen=True)
class Netem:
    """A degraded link, as `tc netem delay {delay_ms}ms loss {loss * 100}%` in both directions."""

    delay_ms: float = 0.0
    loss: float = 0.0  # the probability that a frame is dropped
    seed: int = 0


class SimulatedHosts:
    def __init__(self, tag: str, netem: Optional[Netem] = None, stats: Optional[Path] = None):
        self.ns = {host: f"em{host}{tag}" for host in ADDRESSES}
        self.dev = {host: f"{'ta' if netem else 've'}{host}{tag}" for host in ADDRESSES}
        self.processes: List[subprocess.Popen] = []
        self.forwarder: Optional[subprocess.Popen] = None
        for host, ns in self.ns.items():
            _ip("netns", "add", ns)
        if netem is None:
            _ip("link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"])
        for host, address in ADDRESSES.items():
            ns, dev = self.ns[host], self.dev[host]
            if netem is None:
                _ip("link", "set", dev, "netns", ns)
            else:
                _ip("-n", ns, "tuntap", "add", "dev", dev, "mode", "tap")
                _ip("-n", ns, "link", "set", dev, "mtu", str(TAP_MTU))
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        if netem is not None:
            self._start_forwarder(netem, stats)

    def _start_forwarder(self, netem: Netem, stats: Optional[Path]) -> None:
        command = [sys.executable, "-m", "tests.e2e.netem_link", "--delay-ms", str(netem.delay_ms),
                   "--loss", str(netem.loss), "--seed", str(netem.seed),
                   *(f"--{host}={self.ns[host]}/{self.dev[host]}" for host in ADDRESSES),
                   *(["--stats", str(stats)] if stats else [])]
        self.forwarder = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True,
                                          cwd=_REPO)
        answer = self.forwarder.stdout.readline().strip()
        if answer != "ready":
            self.close()
            raise RuntimeError(f"the netem stand-in did not start (exit {self.forwarder.wait(timeout=30)})")

    def link(self, host: str, up: bool) -> None:
        """Takes a host's network link down (or up again), as a cable pulled or a host gone."""
        _ip("-n", self.ns[host], "link", "set", self.dev[host], "up" if up else "down")

    def start(self, host: str, args: List[str], log: Path) -> subprocess.Popen:
        """Runs `estimator-mnist ARGS` on `host`, its output in `log`."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.ns[host], sys.executable, "-m", "estimator_mnist",
                                     *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(proc)
        return proc

    def start_probe(self, host: str, args: List[str]) -> subprocess.Popen:
        """Runs `python -m tests.e2e.link_probe ARGS` on `host`, its output readable."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns[host], sys.executable, "-m", "tests.e2e.link_probe",
                                 *args], stdout=subprocess.PIPE, text=True, start_new_session=True, cwd=_REPO)
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

    def stop_forwarder(self) -> None:
        """Ends the netem stand-in: SIGTERM, so that it writes its counts, then SIGKILL to its group."""
        if self.forwarder is not None and self.forwarder.poll() is None:
            self.forwarder.terminate()
            try:
                self.forwarder.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        kill_groups([self.forwarder] if self.forwarder is not None else [])

    def close(self) -> None:
        kill_groups(self.processes)
        self.stop_forwarder()
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)  # deletes its veth or TAP
