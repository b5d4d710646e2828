"""TensorFlow behaviour that needs a process of its own (TF_CONFIG read at start, graph mode)."""

import json
import subprocess
import sys
from pathlib import Path

PROBE = str(Path(__file__).parent / "collective_probe.py")


def test_collective_options_reach_the_all_reduce_ops():
    """The v1 MultiWorkerMirroredStrategy takes no options; the timeout and ring must still be in its graph."""
    result = subprocess.run([sys.executable, PROBE], capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    assert json.loads(lines[0][len("RESULT "):]) == [[42.0, "ring"]]
