"""TensorFlow behaviour that needs a process of its own (TF_CONFIG read at start, graph mode)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = str(Path(__file__).parent / "collective_probe.py")


def test_collective_options_reach_the_all_reduce_ops():
    """The v1 MultiWorkerMirroredStrategy takes no options; the ring must still be in its graph, and no timeout:
    TF 2.15 starts a thread per collective op that has one (step_watchdog.py bounds the step instead)."""
    result = subprocess.run([sys.executable, PROBE], capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    assert json.loads(lines[0][len("RESULT "):]) == [[0.0, "ring"]]


THREAD_POOL_PROBE = str(Path(__file__).parent / "thread_pool_probe.py")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable core: one thread either way")
def test_a_task_computes_on_the_intra_op_threads_it_was_given():
    """TF 2.15 sizes one process-wide intra-op pool at its first device; a task asked for 1 thread got one per core.

    The probe is not pinned, so only the pool's size can keep it to one core. Other load on the machine can
    only lower the figure, never raise it: the test cannot fail because CI is busy.
    """
    result = subprocess.run([sys.executable, THREAD_POOL_PROBE, "1"], capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    cores = float(lines[0].split()[1])
    assert cores < 1.3, f"1 intra-op thread kept {cores} cores busy"


ONEDNN_PROBE = str(Path(__file__).parent / "onednn_probe.py")


@pytest.mark.parametrize("exported, enabled", [(None, "True"), ("0", "False")])
def test_a_task_computes_with_onednn_unless_the_user_turned_it_off(exported, enabled):
    """TF 2.15 reads TF_ENABLE_ONEDNN_OPTS once, at its first op: the plan must set it before TensorFlow loads.

    On CPUs without AVX512_VNNI, AVX512_BF16 or AMX (an AVX2-only EPYC), TensorFlow alone would say False.
    """
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if exported is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = exported
    result = subprocess.run([sys.executable, ONEDNN_PROBE], capture_output=True, text=True, timeout=300,
                            env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines == [f"RESULT {enabled}"], result.stderr[-3000:]
