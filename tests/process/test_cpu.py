"""CPU priority: every thread of a process, the ones already running included, moves to SCHED_IDLE or a niceness."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
