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

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from estimator_mnist.config import read_yaml  # noqa: E402
from estimator_mnist.launcher import descendants as children, living_pids as alive  # noqa: E402


def task_pids(launcher_pid: int):
    """{task: pid} of the `train` processes the launcher runs now."""
    result = {}
    for pid in children(launcher_pid):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "train" in args and "--task" in args:
            result[args[args.index("--task") + 1]] = pid
    return result


def one_run(cluster_file: Path, workdir: Path, kills: int, policy: str, rng: random.Random, window: float) -> dict:
    data = read_yaml(cluster_file)
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    data["run_dir"] = str(run_dir)
    data["restart"] = {**(data.get("restart") or {}), "policy": policy, "max_restarts": max(kills, 1) + 1}
    path = run_dir / "cluster.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Kill times: spread over the expected training window, after training began.
    schedule = sorted(rng.uniform(0.05, 0.9) * window for _ in range(kills))
    made, seen, last_kill = [], set(), None
    log_dir = run_dir / "logs"
    while proc.poll() is None and len(made) < kills:
        seen.update(children(proc.pid))
        began = any(re.search(r"step = [1-9]", p.read_text(errors="replace")) for p in log_dir.glob("*/*.log"))
        if began and time.monotonic() - started >= schedule[len(made)]:
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
    while proc.poll() is None:
        seen.update(children(proc.pid))
        time.sleep(1)
    out = proc.stdout.read()
    summary_path = run_dir / "run_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return {
        "exit": proc.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "seconds_after_last_kill": round(time.monotonic() - last_kill, 1) if last_kill else None,
        "global_step": summary.get("global_step"),
        "accuracy": summary.get("accuracy"),
        "kills": made,
        "restarts_reported": len(summary.get("restarts", [])),
        "leftover_processes": alive(seen | set(summary.get("all_pids", []))),
        "last_line": out.strip().splitlines()[-1] if out.strip() else "",
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", type=Path, default=REPO / "config" / "local.yaml")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kills", type=int, default=2, help="SIGKILLs per run")
    parser.add_argument("--policy", choices=("on_failure", "never"), default="on_failure")
    parser.add_argument("--window", type=float, default=240.0, help="seconds over which kills are spread")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the runs here")
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
        args.json.write_text(json.dumps(runs, indent=2))
    finished = sum(r["exit"] == 0 for r in runs)
    accuracies = [r["accuracy"] for r in runs if r["accuracy"] is not None]
    kills = sum(len(r["kills"]) for r in runs)
    print(f"RESULT runs={len(runs)} finished={finished} "
          f"min_accuracy={min(accuracies) if accuracies else 'none'} "
          f"restarts_reported={sum(r['restarts_reported'] for r in runs)}/{kills} "
          f"max_exit_after_last_kill={max((r['seconds_after_last_kill'] or 0) for r in runs):.1f}s "
          f"leftover_processes={sum(len(r['leftover_processes']) for r in runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
