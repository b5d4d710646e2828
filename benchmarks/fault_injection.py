"""Random kills on a real cluster: does the run still finish, with every restart reported?

Each run launches a cluster file (default config/local.yaml) with a fresh
run_dir, waits for training to start, then SIGKILLs a random task (chief,
worker, ps or evaluator) at random times, --kills per run. It prints, per
run: the exit code, seconds, global step, final accuracy, the restarts the
summary reports against the kills made, and processes left behind; then a
last machine-readable line:

  RESULT runs=... finished=... min_accuracy=... restarts_reported=.../... leftover_processes=...

  .venv/bin/python benchmarks/fault_injection.py --runs 10 --kills 2
  .venv/bin/python benchmarks/fault_injection.py --policy never      # each run should fail within 60 s

It is a measurement, not a test: it asserts nothing.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil

from estimator_mnist.supervise.process_group import living_pids
from estimator_mnist.model_files.progress import read_progress

from common import DEFAULT_CONFIG, Launch, benchmark_parser, launch_command, start, write_json
from tests.process_table import descendants, task_of_command  # noqa: E402  (common put the repository on the path)
from results import figures_of, record_run


def task_pids(launcher_pid: int) -> dict:
    """{task: pid} of the `train` processes the launcher runs now."""
    result = {}
    for pid in descendants(launcher_pid):
        try:
            task = task_of_command(psutil.Process(pid).cmdline())
        except psutil.Error:
            continue
        if task is not None:
            result[task] = pid
    return result


def training_began(run_dir: Path) -> bool:
    return any(record.get("local_step", 0) >= 1 for record in read_progress(str(run_dir)).values())


def kill_tasks(proc, run_dir: Path, started: float, kills: int, rng: random.Random, window: float, seen: set):
    """SIGKILLs a random task `kills` times once training began: ([{task, at}], monotonic time of the last kill)."""
    # Kill times: spread over the expected training window, after training began.
    schedule = sorted(rng.uniform(0.05, 0.9) * window for _ in range(kills))
    made, last_kill = [], None
    while proc.poll() is None and len(made) < kills:
        seen.update(descendants(proc.pid))
        if training_began(run_dir) and time.monotonic() - started >= schedule[len(made)]:
            tasks = task_pids(proc.pid)
            if tasks:
                task = rng.choice(sorted(tasks))
                try:
                    os.kill(tasks[task], signal.SIGKILL)
                    last_kill = time.monotonic()
                    made.append({"task": task, "at": round(last_kill - started, 1)})
                except ProcessLookupError:
                    pass
        time.sleep(0.5)
    return made, last_kill


def one_run(cluster_file: Path, workdir: Path, kills: int, policy: str, rng: random.Random, window: float) -> dict:
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    overrides = [f"restart.policy={policy}", f"restart.max_restarts={max(kills, 1) + 1}"]
    output = run_dir / "launch.out"
    started = time.monotonic()
    proc = start(launch_command(cluster_file, run_dir, overrides, quiet=False), output, new_session=False)
    seen: set = set()
    made, last_kill = kill_tasks(proc, run_dir, started, kills, rng, window, seen)
    while proc.poll() is None:
        seen.update(descendants(proc.pid))
        time.sleep(1)
    run = Launch(run_dir, started, time.monotonic(), proc.returncode, output.read_text(errors="replace"))
    summary = run.summary()
    return {
        "exit": run.returncode,
        "seconds": round(run.exited - run.launched, 1),
        "seconds_after_last_kill": round(run.exited - last_kill, 1) if last_kill else None,
        "global_step": summary.get("global_step"),
        "accuracy": summary.get("accuracy"),
        "kills": made,
        "restarts_reported": len(summary.get("restarts", [])),
        "leftover_processes": living_pids(seen | set(summary.get("all_pids", []))),
        "last_line": run.output.strip().splitlines()[-1] if run.output.strip() else "",
    }


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, "also write the runs here")
    parser.add_argument("--cluster", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kills", type=int, default=2, help="SIGKILLs per run")
    parser.add_argument("--policy", choices=("on_failure", "never"), default="on_failure")
    parser.add_argument("--window", type=float, default=240.0, help="seconds over which kills are spread")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    runs = []
    with tempfile.TemporaryDirectory(prefix="fault_injection_") as workdir:
        for number in range(1, args.runs + 1):
            result = one_run(args.cluster, Path(workdir), args.kills, args.policy, rng, args.window)
            runs.append(result)
            kills = ", ".join(f"{k['task']}@{k['at']}s" for k in result["kills"])
            print(f"run {number}: exit={result['exit']} {result['seconds']:.0f}s step={result['global_step']} "
                  f"accuracy={result['accuracy']} kills=[{kills}] restarts={result['restarts_reported']} "
                  f"exit_after_last_kill={result['seconds_after_last_kill']}s "
                  f"leftover={result['leftover_processes']}", flush=True)
    if args.json:
        write_json(args.json, runs)
    finished = sum(r["exit"] == 0 for r in runs)
    accuracies = [r["accuracy"] for r in runs if r["accuracy"] is not None]
    kills = sum(len(r["kills"]) for r in runs)
    result = (f"RESULT runs={len(runs)} finished={finished} "
              f"min_accuracy={min(accuracies) if accuracies else 'none'} "
              f"restarts_reported={sum(r['restarts_reported'] for r in runs)}/{kills} "
              f"max_exit_after_last_kill={max((r['seconds_after_last_kill'] or 0) for r in runs):.1f}s "
              f"leftover_processes={sum(len(r['leftover_processes']) for r in runs)}")
    record_run(args, "fault_injection", figures_of(result))
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
