"""The suite's own environment: a pytest worker whose gRPC client has run (after a serve test) forks children
that reach their exec. conftest.py turns gRPC's fork handlers off for that (grpc/grpc#43055); without it, about
4 in 100 such children die with SIGABRT (Xeon family 6 model 207), so 300 all living shows the setting works."""

import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

PROBE = str(Path(__file__).parent / "grpc_fork_probe.py")
FORKS = 300


def test_a_process_whose_grpc_client_has_run_forks_children_that_all_reach_their_exec():
    result = subprocess.run([sys.executable, PROBE, str(FORKS)], cwd=REPO, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0"], (result.stdout, result.stderr[-2000:])
