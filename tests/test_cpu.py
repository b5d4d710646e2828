import os
import subprocess
import sys

import pytest

from conftest import REPO

# Starts a thread first: the priority must reach threads that already exist, not only new ones.
PROBE = r"""
import os, sys, threading
from estimator_mnist.cpu import lower_cpu_priority
ready, done = threading.Event(), threading.Event()
def idle():
    ready.set(); done.wait()
worker = threading.Thread(target=idle); worker.start(); ready.wait()
said = lower_cpu_priority(sys.argv[1] if sys.argv[1] == "idle" else int(sys.argv[1]))
later = threading.Thread(target=done.wait); later.start()
tids = [int(t) for t in os.listdir("/proc/self/task")]
print(said)
print(sorted({os.sched_getscheduler(t) for t in tids}))
print(sorted({os.getpriority(os.PRIO_PROCESS, t) for t in tids}))
done.set()
"""


def probe(setting):
    out = subprocess.run([sys.executable, "-c", PROBE, str(setting)], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return out[0], eval(out[1]), eval(out[2])  # noqa: S307 - lists of ints printed by the probe


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
