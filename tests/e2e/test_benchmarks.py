"""The Keras comparison benchmark, run for a few steps so that it never rots. It measures nothing here."""

import json
import re
import subprocess
import sys

import psutil

from tests.helpers import REPO

NUMBER = r"-?\d+\.\d{3}"
RESULT = re.compile(rf"RESULT fp32_2w_ratio={NUMBER} ddp_2w_ratio=none two_over_one=none startup_ratio={NUMBER} "
                    rf"keras_minus_trainer_points={NUMBER} bf16_2w_ratio={NUMBER} exit_after_last_step={NUMBER} "
                    rf"time_to_992=(none|{NUMBER}) final_accuracy={NUMBER} precision=(float32|mixed_bfloat16) "
                    r"cpu=(amx|avx512_bf16|avx512|avx2|other)")


def processes_mentioning(text: str):
    """Pids of the processes with `text` in their command line."""
    return [p.pid for p in psutil.process_iter(["cmdline"]) if any(text in arg for arg in p.info["cmdline"] or ())]


def recorded(results_file):
    """The lines a benchmark appended to the results file the tests give it (tests/conftest.py)."""
    return [json.loads(line) for line in results_file.read_text().splitlines()] if results_file.exists() else []


def test_keras_comparison_smoke_run(tmp_path, mnist_data_dir, benchmark_results):
    out = tmp_path / "figures.json"
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "keras_comparison.py"), "--smoke",
                             "--ddp", "off", "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1200)
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
    (default,) = figures["default_runs"]
    assert default["max_steps"] == 20 and default["evaluations"][-1][0] == 20
    assert default["precision"] in ("float32", "mixed_bfloat16") and 0 <= default["exit_after_last_step"] < 60
    assert not processes_mentioning("keras_comparison_"), "the benchmark left processes behind"
    assert recorded(benchmark_results) == [], "a smoke run measures nothing: it appends no results line"


def test_ddp_reference_data_are_the_batches_input_fn_gives_each_worker(tmp_path, mnist_data_dir):
    """The PyTorch reference trains on exactly the trainer's batches (benchmarks/ddp_data.py); TensorFlow side only."""
    result = subprocess.run([sys.executable, "-m", "tests.e2e.ddp_data_probe", str(mnist_data_dir), str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("same"), result.stdout[-2000:] + result.stderr[-3000:]


def test_schedule_probe_smoke_run(mnist_data_dir, benchmark_results):
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "schedule_probe.py"), "--steps", "2",
                             "--batch", "8", "--warmup", "1", "--start", "1", "--every", "1",
                             "--data-dir", str(mnist_data_dir)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"RESULT first_992=(None|\d+) final=\d\.\d{4} evaluations=\[\[1, [\d.]+\], \[2, [\d.]+\]\]",
                        last), last
    (line,) = recorded(benchmark_results)
    assert line["benchmark"] == "schedule_probe" and [step for step, _ in line["figures"]["evaluations"]] == [1, 2]


def test_onednn_kernels_smoke_run(benchmark_results):
    """The kernel census finds the trainer worker's log and oneDNN's lines in it (20 steps; measures nothing)."""
    too_few = subprocess.run([sys.executable, str(REPO / "benchmarks" / "onednn_kernels.py"), "--steps", "4"],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert too_few.returncode == 2 and "at least 20" in too_few.stderr, too_few.stderr
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "onednn_kernels.py"), "--steps", "20",
                             "--ddp", "off"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert re.search(r"^ +\d+\.\d\d  convolution ", result.stdout, re.M), result.stdout[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"RESULT trainer_ms_per_step=\d+\.\d\d ddp_ms_per_step=none isa=native", last), last
    assert float(last.split()[1].split("=")[1]) > 0
    assert not processes_mentioning("onednn_kernels_"), "the benchmark left processes behind"
    (line,) = recorded(benchmark_results)
    assert line["benchmark"] == "onednn_kernels" and line["variant"] == "--steps 20"
    assert line["figures"]["isa"] == "native" and line["figures"]["trainer_ms_per_step"] > 0
