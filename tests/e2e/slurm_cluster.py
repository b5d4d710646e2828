"""A real two-node Slurm cluster on this machine, for the Slurm tests: Debian's slurmctld, slurmd and munge.

Each node is a network namespace of SimulatedHosts (n1 is 192.0.2.1, n2 is 192.0.2.2, joined by a veth
pair); slurmctld runs beside n1. Everything else is the test's own: a temporary directory with slurm.conf,
the state, spool, logs and pid files (`%n` gives each node its own), a munged on its own socket
(AuthInfo=socket=...), non-default ports, and a private mount namespace per daemon whose /etc/hosts names
the nodes (the tasks inherit it; the machine's /etc/hosts is never edited). slurmd enters only the network
namespace with `nsenter --net`: under `ip netns exec`, which remounts /sys, it stops with "No filesystem
mounted on /sys/fs/cgroup". Client commands (sbatch, scontrol, scancel) run in n1's namespace.
Its default partition is preempted by the partition HIGH_PARTITION as a site configures it (REQUEUE with a
GraceTime, no send_user_signal); tests/e2e/slurm_events.py switches its mode, preempts, fails a node.
With `reserved_ports` slurm.conf reserves ports for steps (MpiParams=ports=...); without, the common
configuration, the tasks choose their own (plan/slurm_ports.py): the suite runs both.
close() stops the daemons by PID and deletes the namespaces, also after a failure; should the test process
itself be killed, the daemons die with it (PR_SET_PDEATHSIG), and only the named namespaces remain.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from estimator_mnist.supervise.process_group import die_with_parent
from tests.e2e.simulated_hosts import ADDRESSES, SimulatedHosts, kill_groups

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
NODES = {"n1": "a", "n2": "b"}  # Slurm's node name: its SimulatedHosts host
CPUS_PER_NODE = 4  # declared (SlurmdParameters=config_overrides): more than this machine has is fine
MEMORY_MB_PER_NODE = 16384  # declared too, so that jobs asking for memory (--mem) fit; CR_CPU does not count it
CTLD_PORT, SLURMD_PORT = 6917, 6918  # not Slurm's defaults (6817, 6818)
# The ports Slurm reserves for steps (srun --resv-ports, which the batch script asks for where slurm.conf has
# them): each step gets its own, held by no other step on its nodes.
RESERVED_PORTS = "20000-20999"
START_SECS = 60
# A requeued job may start again cred_expire + 1 s later (Slurm 22.05, job_mgr.c; default 120 s): shorter here.
CRED_EXPIRE_SECS = 15
# Preemption as sites configure it: partition priority, REQUEUE mode with a grace time, no
# PreemptParameters=send_user_signal (Slurm's default: only the steps get SIGTERM at the grace's start).
GRACE_SECS = 60
HIGH_PARTITION = "high"  # its jobs preempt the default partition's
# A node whose slurmd stops answering is DOWN after this (default 300 s): the node-failure test waits for it.
SLURMD_TIMEOUT_SECS = 20
PREEMPTION = {"grace": GRACE_SECS, "high": HIGH_PARTITION, "slurmd_timeout": SLURMD_TIMEOUT_SECS}

SLURM_CONF = """\
ClusterName=em{tag}
SlurmctldHost={hostname}({ctld_address})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket},cred_expire={cred_expire}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
MpiDefault=none
{mpi_params}SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait={kill_wait}
MinJobAge=600
InactiveLimit=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmdTimeout={slurmd_timeout}
{nodes}
PartitionName=em Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime={grace}
PartitionName={high} Nodes=n[1-2] MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
"""


class SlurmCluster:
    def __init__(self, tag: str, kill_wait: int = 30, reserved_ports: bool = True):
        self.tag, self.reserved_ports = tag, reserved_ports
        self.daemons: List[subprocess.Popen] = []
        self.root = Path(tempfile.mkdtemp(prefix=f"em-slurm-{tag}-"))
        self.root.chmod(0o755)  # munged, as the munge user, must reach its own directory below
        self.hosts = SimulatedHosts(tag)
        try:
            self._start(kill_wait)
        except BaseException:
            self.close()
            raise

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self) -> Dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_files(self, kill_wait: int) -> None:
        for sub in ("state", "spool", "munge"):
            (self.root / sub).mkdir()
        shutil.chown(self.root / "munge", "munge", "munge")
        (self.root / "munge").chmod(0o755)  # munged wants its socket's directory reachable by everyone
        nodes = "\n".join(f"NodeName={name} NodeAddr={ADDRESSES[host]} CPUs={CPUS_PER_NODE} "
                          f"RealMemory={MEMORY_MB_PER_NODE} State=UNKNOWN" for name, host in NODES.items())
        self.conf.write_text(SLURM_CONF.format(
            tag=self.tag, hostname=socket.gethostname(), ctld_address=ADDRESSES["a"], ctld_port=CTLD_PORT,
            slurmd_port=SLURMD_PORT, munge_socket=self.root / "munge" / "socket", root=self.root, nodes=nodes,
            kill_wait=kill_wait, cred_expire=CRED_EXPIRE_SECS, **PREEMPTION,
            mpi_params=f"MpiParams=ports={RESERVED_PORTS}\n" if self.reserved_ports else ""))
        machine_hosts = Path("/etc/hosts").read_text(encoding="utf-8")
        names = "".join(f"{ADDRESSES[host]} {name}\n" for name, host in NODES.items())
        (self.root / "hosts").write_text(machine_hosts + names)

    def _daemon(self, name: str, command: List[str], host: str) -> subprocess.Popen:
        """`command` in a private mount namespace with the test's /etc/hosts, in `host`'s network namespace."""
        script = f'mount --bind "$0" /etc/hosts && exec nsenter --net=/run/netns/{self.hosts.ns[host]} "$@"'
        with open(self.root / f"{name}.out", "ab") as out:
            proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                                     str(self.root / "hosts"), *command], stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env(), start_new_session=True, preexec_fn=die_with_parent)
        self.daemons.append(proc)
        return proc

    def _start(self, kill_wait: int) -> None:
        self._write_files(kill_wait)
        munge = self.root / "munge"
        with open(self.root / "munged.out", "ab") as out:
            self.daemons.append(subprocess.Popen(
                ["setpriv", "--reuid=munge", "--regid=munge", "--clear-groups", "--pdeathsig=KILL", "munged",
                 "--foreground", f"--socket={munge / 'socket'}",
                 f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                 f"--seed-file={munge / 'munged.seed'}"], stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True))
        self._wait_for(lambda: (munge / "socket").exists(), "munged's socket")
        self._daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)], "a")
        for name, host in NODES.items():
            self._daemon(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(self.conf)], host)
        self._wait_for(self._nodes_idle, "both nodes idle")

    def _nodes_idle(self) -> bool:
        result = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        states = dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)
        return states.get("n1") == "idle" and states.get("n2") == "idle"

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_SECS
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p.args for p in self.daemons if p.poll() is not None]
            if dead:
                break
            time.sleep(0.3)
        raise RuntimeError(f"the Slurm cluster did not start ({what}); logs in {self.root}:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")))

    def run(self, command: List[str], check: bool = True, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """A Slurm client command (sbatch, scontrol, ...) in n1's namespace."""
        return subprocess.run(["nsenter", f"--net=/run/netns/{self.hosts.ns['a']}", *command], env=self.env(),
                              capture_output=True, text=True, check=check, timeout=timeout, **kwargs)

    def popen(self, command: List[str], log: Path) -> subprocess.Popen:
        with open(log, "ab") as out:
            proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{self.hosts.ns['a']}", *command], env=self.env(),
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.hosts.processes.append(proc)
        return proc

    def next_job_id_at_least(self, job_id: int) -> None:
        """The next job submitted gets `job_id` or more (sbatch has no --jobid in Slurm 22.05): slurmctld's next id
        is at least FirstJobId, which `scontrol reconfigure` re-reads (job_mgr.c, get_next_job_id)."""
        lines = [line for line in self.conf.read_text().splitlines() if not line.startswith("FirstJobId=")]
        self.conf.write_text("\n".join(lines + [f"FirstJobId={job_id}"]) + "\n")
        self.run(["scontrol", "reconfigure"])

    def job(self, job_id: str) -> Dict[str, str]:
        """`scontrol show job` as a dict (JobState, ExitCode, Restarts, ...)."""
        text = self.run(["scontrol", "-o", "show", "job", job_id]).stdout
        return dict(item.split("=", 1) for item in text.split() if "=" in item)

    def processes_left(self, marker: str, settle_secs: float = 10) -> List[str]:
        """Job processes still running after `settle_secs`: any slurmstepd of this cluster, and any process whose
        command line holds `marker` (the test's directory, which every task's command names)."""
        deadline = time.monotonic() + settle_secs
        while True:
            result = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, check=True)
            left = [line for line in result.stdout.splitlines()[1:] if line.split()[1][0] != "Z"
                    and (("slurmstepd" in line and self._ours(line.split()[0])) or marker in line)]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def _ours(self, pid: str) -> bool:
        """Whether a slurmstepd is this cluster's (its slurmd's environment names our slurm.conf), not that of
        another test's cluster on the machine."""
        try:
            return f"SLURM_CONF={self.conf}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False  # gone meanwhile

    def _cancel_jobs(self) -> None:
        """Every job of this cluster cancelled, so that no slurmstepd (a daemon of its own) outlives the cluster."""
        self.run(["scancel", "--full", "--user=root"], check=False, timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=30).stdout.strip():
                return
            time.sleep(0.5)

    def close(self) -> None:
        if self.daemons and all(p.poll() is None for p in self.daemons):
            try:
                self._cancel_jobs()
            except (OSError, subprocess.SubprocessError):
                pass  # the daemons are stopped below either way
        for proc in reversed(self.daemons):  # slurmd, slurmctld, then munged
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(p.poll() is None for p in self.daemons):
            time.sleep(0.2)
        kill_groups(self.daemons)
        self.hosts.close()
        shutil.rmtree(self.root, ignore_errors=True)
