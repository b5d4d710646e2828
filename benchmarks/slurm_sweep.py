"""A sweep as a Slurm job array on a real two-node Slurm cluster (tests/e2e/slurm_cluster.py), end to end.

usage: python benchmarks/slurm_sweep.py [--steps 150] [--results FILE | --no-results] [--note TEXT]

Runs as root (network namespaces, Slurm's daemons), with MNIST prepared in ~/tensorflow_datasets:
1. a 4-trial grid (model.learning_rate=0.001,0.003 x training.batch_size_per_replica=32,64) of
   config/one_device.yaml at --steps steps, 2 at a time, 3 CPUs each on 4-CPU nodes; while trial-000 trains,
   `scancel --signal=TERM` on its array task; then best.yaml validated, `ensemble --sweep-dir` and `predict`;
2. `--early-stop median` on model.learning_rate=0.003,0.002,0.001,1e-6, 2 at a time;
3. the first script submitted again, and the first sweep with another --param.
Prints each check's figures, then a RESULT line (the results file: benchmarks/results.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for tests.e2e's Slurm cluster

from results import BenchmarkParser, record_run  # noqa: E402
from estimator_mnist.config import apply_overrides, config_from_dict, default_data_dir, read_yaml  # noqa: E402
from estimator_mnist.mnist_data.arrays import load_split_numpy  # noqa: E402
from estimator_mnist.model_files.progress import read_progress  # noqa: E402
from estimator_mnist.sweep import records  # noqa: E402
from tests.e2e.slurm_cluster import SlurmCluster  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
GRID = ["--param", "model.learning_rate=0.001,0.003", "--param", "training.batch_size_per_replica=32,64"]
EARLY = ["--param", "model.learning_rate=0.003,0.002,0.001,1e-6"]


def cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "estimator_mnist", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def base_yaml(work: Path, steps: int) -> Path:
    data = apply_overrides(read_yaml(str(REPO / "config" / "one_device.yaml")),
                           [f"training.max_steps={steps}", f"training.save_checkpoints_steps={steps // 3}",
                            "training.log_step_count_steps=10", "evaluation.throttle_secs=0",
                            "evaluation.start_delay_secs=0"])
    path = work / "base.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def script(base: Path, sweep_dir: Path, params, *flags):
    made = cli("sweep", "--cluster", str(base), *params, "--sweep-dir", str(sweep_dir), "--slurm", "--parallel", "2",
               "--cores-per-trial", "3", *flags)
    if made.returncode != 0:
        raise SystemExit(f"sweep --slurm failed: {made.stderr}")
    path = sweep_dir.parent / f"{sweep_dir.name}.sh"
    path.write_text(made.stdout)
    return path


def submit(slurm, path: Path, wait: bool) -> tuple:
    started = time.time()
    done = slurm.run(["sbatch", "--parsable", *(["--wait"] if wait else []), str(path)], check=False, timeout=3600)
    return done.stdout.strip().split(";")[0], done.returncode, time.time() - started


def wait_until(predicate, timeout=1800):
    deadline = time.time() + timeout
    while time.time() < deadline and not predicate():
        time.sleep(1)


def step_of(trial_dir: Path) -> int:
    return (read_progress(str(trial_dir)).get("chief:0") or {}).get("global_step") or 0


def grid_check(slurm, work: Path, base: Path) -> dict:
    sweep_dir = work / "grid"
    job, _, _ = submit(slurm, script(base, sweep_dir, GRID), wait=False)
    started = time.time()
    wait_until(lambda: step_of(sweep_dir / "trial-000") >= 30)
    # As a user would: JOB_INDEX. scancel retries while slurmctld answers "try again later" (docs/slurm_sweeps.md).
    signalled = slurm.run(["scancel", "--signal=TERM", f"{job}_0"], check=False, timeout=300)
    done = ("finished", "stopped", "failed")
    wait_until(lambda: slurm.job(job).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED")
               and all(t["state"] in done for t in records.read_sweep(sweep_dir)["trials"]))
    wall = time.time() - started
    record = records.read_sweep(sweep_dir)
    trials = record["trials"]
    config_from_dict(read_yaml(str(sweep_dir / records.BEST_FILE)), "best.yaml")  # validates, or raises
    built = cli("ensemble", "--sweep-dir", str(sweep_dir))
    images, labels = load_split_numpy("test", read_yaml(str(base))["data_dir"] if "data_dir" in read_yaml(str(base))
                                      else default_data_dir())
    np.save(work / "digits.npy", images[:20, ..., 0])
    predicted = cli("predict", "--model", str(sweep_dir / "ensemble"), "--json", str(work / "digits.npy"))
    classes = [p["class"] for p in json.loads(predicted.stdout)["predictions"]] if predicted.returncode == 0 else []
    first = trials[0]
    return {"grid_wall_secs": round(wall, 1), "grid_states": "/".join(t["state"] for t in trials),
            "grid_nodes": "/".join(t.get("node", "-") for t in trials), "ranked_by": record["ranked_by"],
            "grid_validation": "/".join(f"{t.get('validation_accuracy') or 0:.4f}" for t in trials),
            "best": record.get("best"), "scancel_exit": signalled.returncode,
            "signalled_attempts": first["attempts"],
            "signalled_resumed_from": first["history"][-1]["from_step"] if first.get("history") else None,
            "ensemble_exit": built.returncode,
            "ensemble_validation": (records.read_sweep(sweep_dir).get("ensemble") or {}).get("validation_accuracy"),
            "predict_correct_of_20": int(np.sum(np.array(classes) == labels[:20])) if classes else None,
            "script": str(work / "grid.sh"), "job": job}


def early_check(slurm, work: Path, base: Path) -> dict:
    sweep_dir = work / "early"
    _, code, wall = submit(slurm, script(base, sweep_dir, EARLY, "--early-stop", "median"), wait=True)
    last = records.read_sweep(sweep_dir)["trials"][-1]
    return {"early_exit": code, "early_wall_secs": round(wall, 1), "early_last_state": last["state"],
            "early_last_step": last.get("stopped_at_step"), "early_reason": last.get("reason")}


def resume_check(slurm, work: Path, base: Path, grid: dict) -> dict:
    before = [t["attempts"] for t in records.read_sweep(work / "grid")["trials"]]
    job, code, wall = submit(slurm, Path(grid["script"]), wait=True)
    after = [t["attempts"] for t in records.read_sweep(work / "grid")["trials"]]
    other = cli("sweep", "--cluster", str(base), "--param", "model.learning_rate=0.01,0.003", GRID[2], GRID[3],
                "--sweep-dir", str(work / "grid"), "--slurm")
    return {"again_exit": code, "again_wall_secs": round(wall, 1), "again_trained": int(after != before),
            "other_exit": other.returncode, "other_lines": len(other.stderr.strip().splitlines()),
            "other_line": other.stderr.strip()}


def main(argv=None) -> int:
    parser = BenchmarkParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args(argv)
    slurm = SlurmCluster(f"b{int(time.time()) % 100000}")
    try:
        with tempfile.TemporaryDirectory(prefix="em-slurm-sweep-") as tmp:
            work = Path(tmp)
            base = base_yaml(work, args.steps)
            figures = grid_check(slurm, work, base)
            figures.update(early_check(slurm, work, base))
            figures.update(resume_check(slurm, work, base, figures))
    finally:
        slurm.close()
    for key, value in figures.items():
        print(f"{key}: {value}")
    shown = {k: v for k, v in figures.items() if k not in ("script", "early_reason", "other_line", "job")}
    record_run(args, "slurm_sweep", shown)
    print("RESULT " + " ".join(f"{k}={v}" for k, v in shown.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
