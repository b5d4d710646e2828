"""The Keras comparison benchmark, run for a few steps so that it never rots. It measures nothing here."""

import json
import re
import subprocess
import sys

import psutil

from tests.helpers import REPO

RESULT = re.compile(r"RESULT fp32_2w_ratio=\d+\.\d{3} bf16_2w_ratio=\d+\.\d{3} exit_over_last_step=\d+\.\d{3} "
                    r"time_to_99=(none|\d+\.\d)")


def processes_mentioning(text: str):
    """Pids of the processes with `text` in their command line."""
    return [p.pid for p in psutil.process_iter(["cmdline"]) if any(text in arg for arg in p.info["cmdline"] or ())]


def test_keras_comparison_smoke_run(tmp_path, mnist_data_dir):
    out = tmp_path / "figures.json"
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "keras_comparison.py"), "--smoke",
                             "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert RESULT.fullmatch(result.stdout.strip().splitlines()[-1]), result.stdout[-2000:]
    figures = json.loads(out.read_text())
    assert {r["system"] for r in figures["runs"]} == {"trainer", "reference", "trainer_defaults"}
    for run in figures["runs"]:
        assert run["workers"] == 2 and run["images_per_sec"] > 0
        assert 0 < run["seconds_to_first_step"] <= run["seconds_to_last_step"] <= run["seconds_to_exit"]
        assert 0.0 <= run["accuracy"] <= 1.0
    assert "| 2 | steady images/s (summed) |" in "\n".join(figures["table"])
    assert all(v["first_epoch"] > 0 and v["cached"] > 0 for v in figures["input_pipeline"].values())
    default = figures["default_run"]
    assert default["max_steps"] == 20 and default["evaluations"][-1][0] == 20
    assert not processes_mentioning("keras_comparison_"), "the benchmark left processes behind"
