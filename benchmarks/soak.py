"""A long run of a cluster file: do threads, memory, open files and disk stay flat?

Runs the cluster file (default config/local.yaml) with training.max_steps
raised so that it trains for about --minutes (the step rate is taken from a
short calibration run first, or given with --steps-per-sec). Every 10 s it
samples each task's TensorFlow process (threads, RSS, open file descriptors,
its global step) into a CSV file, and the run directory's disk use by kind
(logs, TensorBoard events, checkpoints, exports). At the end it prints each
task's growth and the final accuracy, and a last machine-readable line:

  RESULT minutes=... steps=... accuracy=... restarts=... max_thread_growth=... max_rss_growth=...% ...

The checks it prints as pass or fail (issue 36): no restart; each trainer's
threads at the end at most 50 above their count at step 100; RSS and fds
within 10% of their value after the first minute; accuracy at least 99.2%.

  .venv/bin/python benchmarks/soak.py --minutes 30 --csv soak.csv
  .venv/bin/python benchmarks/soak.py --minutes 5 --steps-per-sec 9

It is a measurement, not a test: it asserts nothing.
"""

from __future__ import annotations

import csv
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import psutil

from estimator_mnist.model_files.progress import read_progress

from common import DEFAULT_CONFIG, Launch, benchmark_parser, launch_command, run_launch, start, write_json
from tests.process_table import tensorflow_processes  # noqa: E402  (common put the repository on the path)
from results import figures_of, record_run

SAMPLE_SECS = 10.0
FIELDS = ("seconds", "task", "pid", "global_step", "threads", "rss_mb", "fds")
DISK_KINDS = ("logs", "events", "checkpoints", "exports", "other")
THREAD_GROWTH_LIMIT, RSS_GROWTH_LIMIT, FD_GROWTH_LIMIT, ACCURACY_GOAL = 50, 0.10, 0.10, 0.992


def disk_kind(relative: Path) -> str:
    parts, name = relative.parts, relative.name
    if parts[0] == "logs":
        return "logs"
    if "export" in parts:
        return "exports"
    if name.startswith("events.out.tfevents"):
        return "events"
    if name.startswith("model.ckpt") or name == "checkpoint":
        return "checkpoints"
    return "other"


def disk_use(run_dir: Path) -> Dict[str, int]:
    """Bytes under run_dir by kind (model_dir is inside it, as by default)."""
    use = dict.fromkeys(DISK_KINDS, 0)
    for root, _, files in os.walk(run_dir):
        for name in files:
            path = Path(root) / name
            try:
                use[disk_kind(path.relative_to(run_dir))] += path.stat().st_size
            except (OSError, ValueError):
                continue
    return use


def sample(launcher_pid: int, run_dir: Path, seconds: float) -> List[dict]:
    steps = {task: record.get("global_step") for task, record in read_progress(str(run_dir)).items()}
    rows = []
    for task, process in sorted(tensorflow_processes(launcher_pid).items()):
        try:
            with process.oneshot():
                rows.append({"seconds": round(seconds, 1), "task": task, "pid": process.pid,
                             "global_step": steps.get(task), "threads": process.num_threads(),
                             "rss_mb": round(process.memory_info().rss / 2**20, 1), "fds": process.num_fds()})
        except psutil.Error:
            continue
    return rows


def growth(rows: List[dict]) -> Dict[str, dict]:
    """Per task (one pid: a restart starts a new series): threads at step >= 100 and at the end, RSS and fds
    after the first minute and at the end."""
    result = {}
    for task in sorted({r["task"] for r in rows}):
        series = [r for r in rows if r["task"] == task]
        series = [r for r in series if r["pid"] == series[-1]["pid"]]
        first_minute = next((r for r in series if r["seconds"] >= series[0]["seconds"] + 60), series[0])
        at_100 = next((r for r in series if (r["global_step"] or 0) >= 100), first_minute)
        last = series[-1]
        result[task] = {
            "threads_at_step_100": at_100["threads"], "threads_at_end": last["threads"],
            "thread_growth": last["threads"] - at_100["threads"],
            "rss_mb_after_1_min": first_minute["rss_mb"], "rss_mb_at_end": last["rss_mb"],
            "rss_growth": (last["rss_mb"] - first_minute["rss_mb"]) / max(first_minute["rss_mb"], 1e-9),
            "fds_after_1_min": first_minute["fds"], "fds_at_end": last["fds"],
            "fd_growth": (last["fds"] - first_minute["fds"]) / max(first_minute["fds"], 1),
        }
    return result


def calibrate(cluster_file: Path, workdir: Path) -> float:
    """Steps per second of the cluster file's training, from a 200-step run's chief record."""
    run = run_launch(workdir, "calibrate_", cluster_file, ["training.max_steps=200"]).check("the calibration run")
    records = read_progress(str(run.run_dir))
    record = records.get("chief:0") or next(iter(records.values()))
    (first_step, first_time), (last_step, last_time) = record["step_times"][0], record["step_times"][-1]
    return (last_step - first_step) / max(last_time - first_time, 1e-9)


def soak(cluster_file: Path, run_dir: Path, max_steps: int, csv_path: Path) -> dict:
    overrides = [f"training.max_steps={max_steps}"]
    output = run_dir / "launch.out"
    started = time.monotonic()
    proc = start(launch_command(cluster_file, run_dir, overrides), output, new_session=True)
    rows, disk = [], []
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        while proc.poll() is None:
            now = time.monotonic() - started
            for row in sample(proc.pid, run_dir, now):
                writer.writerow(row)
                rows.append(row)
            handle.flush()
            disk.append({"seconds": round(now, 1), **disk_use(run_dir)})
            time.sleep(SAMPLE_SECS)
    run = Launch(run_dir, started, time.monotonic(), proc.returncode, output.read_text(errors="replace"))
    summary = run.summary()
    return {"exit": run.returncode, "minutes": round((run.exited - run.launched) / 60, 1), "max_steps": max_steps,
            "accuracy": summary.get("accuracy"), "global_step": summary.get("global_step"),
            "restarts": len(summary.get("restarts", [])), "growth": growth(rows), "disk": disk,
            "last_line": run.output.strip().splitlines()[-1] if run.output.strip() else ""}


def checks(result: dict) -> Dict[str, bool]:
    trainers = {t: g for t, g in result["growth"].items() if t.split(":")[0] in ("chief", "worker")}
    return {
        "no_restart": result["restarts"] == 0 and result["exit"] == 0,
        "threads": all(g["thread_growth"] <= THREAD_GROWTH_LIMIT for g in trainers.values()),
        "rss": all(g["rss_growth"] <= RSS_GROWTH_LIMIT for g in result["growth"].values()),
        "fds": all(g["fd_growth"] <= FD_GROWTH_LIMIT for g in result["growth"].values()),
        "accuracy": (result["accuracy"] or 0) >= ACCURACY_GOAL,
    }


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, "also write the result (growth, disk over time) here")
    parser.add_argument("--cluster", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to train (default 30)")
    parser.add_argument("--steps-per-sec", type=float, help="the training rate (default: a calibration run)")
    parser.add_argument("--csv", type=Path, default=Path("soak.csv"), help="the samples (default soak.csv)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="soak_") as workdir:
        rate = args.steps_per_sec or calibrate(args.cluster, Path(workdir))
        max_steps = max(500, int(rate * args.minutes * 60))
        print(f"soak: {rate:.2f} steps/s -> training.max_steps={max_steps} for about {args.minutes:g} minutes",
              flush=True)
        result = soak(args.cluster, Path(tempfile.mkdtemp(dir=workdir)), max_steps, args.csv)
    for task, g in result["growth"].items():
        print(f"{task}: threads {g['threads_at_step_100']} at step 100 -> {g['threads_at_end']} at the end "
              f"({g['thread_growth']:+d}); RSS {g['rss_mb_after_1_min']} MB after 1 min -> {g['rss_mb_at_end']} MB "
              f"({g['rss_growth']:+.1%}); fds {g['fds_after_1_min']} -> {g['fds_at_end']} ({g['fd_growth']:+.1%})")
    end = result["disk"][-1] if result["disk"] else {}
    print("disk at the end: " + ", ".join(f"{kind} {end.get(kind, 0) / 2**20:.1f} MB" for kind in DISK_KINDS))
    verdicts = checks(result)
    print("checks: " + " ".join(f"{name}={'pass' if ok else 'FAIL'}" for name, ok in verdicts.items()))
    if args.json:
        write_json(args.json, {**result, "checks": verdicts, "steps_per_sec": rate})
    growths = result["growth"].values()
    line = (f"RESULT minutes={result['minutes']} steps={result['global_step']} accuracy={result['accuracy']} "
            f"restarts={result['restarts']} max_thread_growth={max((g['thread_growth'] for g in growths), default=0)} "
            f"max_rss_growth={max((g['rss_growth'] for g in growths), default=0):.1%} "
            f"max_fd_growth={max((g['fd_growth'] for g in growths), default=0):.1%} "
            f"disk_mb={sum(end.get(k, 0) for k in DISK_KINDS) / 2**20:.0f} all_checks="
            f"{'pass' if all(verdicts.values()) else 'FAIL'}")
    record_run(args, "soak", figures_of(line))
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
