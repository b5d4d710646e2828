"""Pods of a TFJob, simulated: Kubeflow's exact TF_CONFIG in each task, its host names resolved to loopback.

One network namespace made by the test holds every "pod" (so their ports
clash with nothing on the machine), and `ip netns exec` gives the processes
in it the test's own /etc/hosts (from /etc/netns/<namespace>/hosts), where
`<job>-<type>-<index>.<namespace>.svc` is 127.0.0.1. Every task shares
loopback, so each gets its own port where real pods would share 2222.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from tests.e2e.simulated_hosts import kill_groups

JOB, NAMESPACE = "mnist", "default"


def host(kind: str, index: int) -> str:
    return f"{JOB}-{kind}-{index}.{NAMESPACE}.svc"


class SimulatedPods:
    def __init__(self, tag: str, replicas: Dict[str, int], first_port: int = 2222):
        """`replicas`: the TFJob's replica specs, e.g. {"Chief": 1, "Worker": 1, "Evaluator": 1}."""
        self.ns = f"empods{tag}"
        self.processes: List[subprocess.Popen] = []
        ports = iter(range(first_port, first_port + 100))
        # Lower-cased replica types and every replica, the evaluator included, as genClusterSpec writes them.
        self.cluster = {kind.lower(): [f"{host(kind.lower(), i)}:{next(ports)}" for i in range(count)]
                        for kind, count in replicas.items()}
        subprocess.run(["ip", "netns", "add", self.ns], check=True, capture_output=True, timeout=30)
        subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True, capture_output=True, timeout=30)
        self.etc = Path("/etc/netns") / self.ns
        self.etc.mkdir(parents=True, exist_ok=True)
        names = " ".join(address.rsplit(":", 1)[0] for hosts in self.cluster.values() for address in hosts)
        (self.etc / "hosts").write_text(f"127.0.0.1 localhost {names}\n")

    def tasks(self) -> List[Tuple[str, int]]:
        return [(kind, i) for kind, hosts in self.cluster.items() for i in range(len(hosts))]

    def tf_config(self, kind: str, index: int) -> str:
        return json.dumps({"cluster": self.cluster, "task": {"type": kind, "index": index}, "environment": "cloud"})

    def start(self, kind: str, index: int, args: List[str], log: Path, env=None) -> subprocess.Popen:
        """`env`: the pod's environment (default: this process's), with its TF_CONFIG."""
        env = {**(os.environ if env is None else env), "TF_CONFIG": self.tf_config(kind, index)}
        with open(log, "ab") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, "-m", "estimator_mnist", *args],
                                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.processes.append(proc)
        return proc

    def close(self) -> None:
        kill_groups(self.processes)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=30)
        shutil.rmtree(self.etc, ignore_errors=True)
