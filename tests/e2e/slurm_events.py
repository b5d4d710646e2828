"""Slurm's own events on the test cluster (slurm_cluster.py): the default partition's PreemptMode switched as an
administrator does, a preemptor of the higher-priority partition, a node lost (its slurmd, slurmstepd and tasks
SIGKILLed by PID) and its slurmd started again."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import List

from tests.e2e.slurm_cluster import HIGH_PARTITION, NODES, SlurmCluster


def set_preempt_mode(cluster: SlurmCluster, mode: str) -> None:
    cluster.run(["scontrol", "update", "partitionname=em", f"preemptmode={mode}"])


def preempt(cluster: SlurmCluster, node: str, cwd: Path) -> str:
    """A job of the higher-priority partition that asks for `node` whole (a second's work); its id."""
    return cluster.run(["sbatch", "--parsable", f"--partition={HIGH_PARTITION}", f"--nodelist={node}", "--nodes=1",
                        "--exclusive", f"--output={cwd / 'preemptor.out'}", "--wrap", "sleep 1"],
                       cwd=cwd).stdout.strip().split(";")[0]


def _in_namespace(pid: str, namespace: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{namespace}").st_ino
    except OSError:
        return False  # gone meanwhile


def fail_node(cluster: SlurmCluster, name: str) -> List[int]:
    """Node `name` lost: every process in its network namespace (its slurmd, slurmstepd and tasks) SIGKILLed; the
    PIDs. slurmctld finds it DOWN after SlurmdTimeout."""
    namespace, killed = cluster.hosts.ns[NODES[name]], []
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        if _in_namespace(pid, namespace):
            try:
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
            except ProcessLookupError:
                pass
    for proc in [p for p in cluster.daemons if p.pid in killed]:  # its slurmd: reaped, no longer one to stop
        proc.wait(timeout=30)
        cluster.daemons.remove(proc)
    return killed


def restore_node(cluster: SlurmCluster, name: str) -> None:
    """slurmd of `name` started again: the node registers and returns to service (ReturnToService=2)."""
    cluster._daemon(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(cluster.conf)],  # pylint: disable=protected-access
                    NODES[name])
