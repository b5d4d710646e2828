"""CPU priority: every thread of a process, the ones already running included, moves to SCHED_IDLE or a niceness."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

PROBE = str(Path(__file__).parent / "priority_probe.py")


def probe(setting):
    out = subprocess.run([sys.executable, PROBE, str(setting)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return out[0], ast.literal_eval(out[1]), ast.literal_eval(out[2])


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux-only")
def test_idle_moves_every_thread_to_sched_idle():
    said, policies, _ = probe("idle")
    assert said.startswith("SCHED_IDLE")
    assert policies == [os.SCHED_IDLE]


def test_a_niceness_applies_to_every_thread():
    said, policies, nice = probe(7)
    assert said == "nice 7"
    assert policies == [os.SCHED_OTHER]
    assert nice == [7]


def test_the_core_sharing_benchmark_times_each_cpu_alone_and_together(benchmark_results):
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "core_sharing.py"), "--seconds", "0.2"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    if len(os.sched_getaffinity(0)) < 2:
        assert "nothing to compare" in lines[-1]
        return
    (record,) = [json.loads(line) for line in benchmark_results.read_text().splitlines()]
    assert record["benchmark"] == "core_sharing" and record["variant"] == "--seconds 0.2"
    assert record["figures"]["cpus"] == len(os.sched_getaffinity(0)) and len(record["figures"]["gflops_alone"]) >= 2
    cpus = [line for line in lines if line.startswith("CPU ")]
    assert len(cpus) == len(os.sched_getaffinity(0))
    assert all(re.fullmatch(r"CPU \d+: \d+\.\d GFLOP/s alone, \d+\.\d with every CPU busy", c) for c in cpus)
    ratio = float(re.fullmatch(r"RESULT together_over_alone=(\d+\.\d\d) cpus=\d+", lines[-1]).group(1))
    assert 0.3 < ratio < 2 * len(cpus)
