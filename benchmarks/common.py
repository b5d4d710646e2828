"""What the benchmarks share: running `estimator-mnist launch` on fresh loopback ports, and their command line.

The benchmarks change a cluster file with `--set` (as a user would) rather
than by editing its text; only the ports are chosen here, free at the moment
of the launch, so that two benchmarks or a running cluster never collide.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

from estimator_mnist.errors import USAGE_EXIT_CODE
from results import REPO, BenchmarkParser

sys.path.insert(0, str(REPO))  # the loopback ports and the process-table helpers live with the tests
from tests.ports import free_loopback_ports  # noqa: E402

DEFAULT_CONFIG = REPO / "config" / "local.yaml"


@dataclasses.dataclass(frozen=True)
class Shape:
    """How many tasks of each role a cluster has; the ports are chosen at each launch."""

    chief: int = 1
    workers: int = 0
    ps: int = 0
    evaluator: bool = False

    def overrides(self) -> List[str]:
        """--set texts that replace a file's cluster by this shape on loopback ports free now."""
        ports = iter(free_loopback_ports(self.chief + self.workers + self.ps))
        texts = []
        for role, count in (("chief", self.chief), ("worker", self.workers), ("ps", self.ps)):
            # null rather than []: the config rejects an empty list as a typo.
            addresses = [f"localhost:{next(ports)}" for _ in range(count)] or None
            texts.append(f"cluster.{role}={json.dumps(addresses)}")
        texts.append(f"cluster.evaluator={'localhost' if self.evaluator else 'null'}")
        return texts


@dataclasses.dataclass
class Launch:
    """One finished `launch`: its run directory, start and end time (one clock), exit code and console output."""

    run_dir: Path
    launched: float
    exited: float
    returncode: int
    output: str

    def summary(self) -> dict:
        path = self.run_dir / "run_summary.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def check(self, what: str) -> "Launch":
        if self.returncode != 0:
            raise SystemExit(f"{what} failed (exit {self.returncode}) in {self.run_dir}:\n{self.output[-3000:]}")
        return self


def launch_command(cluster_file, run_dir: Path, overrides: Sequence[str] = (), data_dir: Optional[str] = None,
                   quiet: bool = True) -> List[str]:
    command = [sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(cluster_file),
               "--run-dir", str(run_dir)]
    if data_dir:
        command += ["--data-dir", str(data_dir)]
    for text in overrides:
        command += ["--set", text]
    return command + (["--quiet"] if quiet else [])


def start(command: List[str], output: Path, new_session: bool = True, env: Optional[dict] = None) -> subprocess.Popen:
    """Starts a program from the repository with its output in a file (a pipe nobody reads would block it).

    In a session of its own, it can be killed with all its children on a timeout.
    """
    with open(output, "wb") as out:
        return subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=new_session, env=env)


def wait_all(processes: List[subprocess.Popen], timeout: Optional[float]) -> float:
    """Waits for every process; returns when the last one exited. Kills their sessions on timeout."""
    deadline = None if timeout is None else time.time() + timeout
    try:
        for process in processes:
            process.wait(timeout=None if deadline is None else max(0.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        for process in processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        raise SystemExit(f"a run took more than {timeout:.0f} s; see the logs under its run directory") from None
    return time.time()


def run_launch(workdir: Path, prefix: str, cluster_file, overrides: Sequence[str] = (), shape: Optional[Shape] = None,
               data_dir: Optional[str] = None, timeout: Optional[float] = None, attempts: int = 3,
               env: Optional[dict] = None) -> Launch:
    """Runs `estimator-mnist launch --quiet` to its end, in a new run directory under `workdir`.

    With `shape`, the cluster gets fresh loopback ports, chosen again when
    another program took one between the choice and the launch.
    """
    for _ in range(attempts):
        run_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
        output = run_dir / "launch.out"
        command = launch_command(cluster_file, run_dir, [*(shape.overrides() if shape else []), *overrides], data_dir)
        launched = time.time()
        process = start(command, output, env=env)
        exited = wait_all([process], timeout)
        result = Launch(run_dir, launched, exited, process.returncode, output.read_text(errors="replace"))
        if shape and result.returncode == USAGE_EXIT_CODE and "already in use" in result.output:
            continue
        return result
    raise SystemExit(f"no free ports after {attempts} attempts")


def benchmark_parser(doc: str, json_help: Optional[str] = "also write every figure here",
                     not_measured: Sequence[str] = ()) -> BenchmarkParser:
    """The command line of a benchmark: its module docstring as the help, --json (unless `json_help` is None), and
    the results file's flags (results.py); `not_measured` names flags that change none of its figures."""
    parser = BenchmarkParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                             not_measured=not_measured)
    if json_help is not None:
        parser.add_argument("--json", type=Path, help=json_help)
    return parser


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
