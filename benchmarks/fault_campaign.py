"""Random faults of every kind on the default cluster: does each run finish at its usual accuracy, and what
does each fault cost?

First one run without a fault (the baseline); then one run per fault, each with a fresh run_dir. A fault is
a signal at a random moment after the launch, start-up included (before the first step, while the group
forms its session), to one of:
- a trainer's TensorFlow process (the child of its `train` process, not the parent), SIGKILL or SIGSTOP;
- the evaluator's TensorFlow process, SIGKILL or SIGSTOP (until its trainers train, the evaluator's parent
  holds it back and it has no child yet: the signal then waits for the child);
- the launcher, SIGKILL: nothing may be left running (its tasks die with it), and `launch` started again
  with the same command resumes from the checkpoint and finishes.
Per fault it prints the phase it hit, when the launcher answered it (its restart record in
run_summary.json), the seconds the run lost against the baseline, the exit code, the final accuracy, and
the processes left; a SIGSTOP should cost at most `launcher.stall_timeout_secs` (--stall) plus a restart.
The last line is machine-readable:

  RESULT faults=... finished=... min_accuracy=... max_lost_kill=... max_lost_stop=... stall_timeout=... leftover=...

The figures, with each kind of fault's cost (seconds), are appended to docs/benchmark_results.jsonl
(benchmarks/results.py); docs/fault_tolerance.md's table is made from them.

  .venv/bin/python benchmarks/fault_campaign.py --faults 8 --stall 60

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


from estimator_mnist.model_files.checkpoints import latest_step
from estimator_mnist.supervise.process_group import living_pids
from estimator_mnist.model_files.progress import read_progress

from common import DEFAULT_CONFIG, Launch, benchmark_parser, launch_command, start, write_json
from results import figures_of, record_run
from tests.process_table import descendants, tensorflow_processes  # noqa: E402  (common put the repository on the path)
from fault_injection import training_began

KINDS = [("SIGKILL", "chief:0"), ("SIGSTOP", "chief:0"), ("SIGKILL", "worker:0"), ("SIGSTOP", "worker:0"),
         ("SIGKILL", "evaluator:0"), ("SIGSTOP", "evaluator:0"), ("SIGKILL", "launcher")]
LEFTOVER_WAIT_SECS = 10  # after a launcher's SIGKILL: its tasks' PR_SET_PDEATHSIG, then their own children


def tensorflow_process(launcher_pid: int, task: str):
    """The pid of `task`'s TensorFlow process (`python -m estimator_mnist.tf_task`, the child of its `train`
    process), once it exists."""
    process = tensorflow_processes(launcher_pid).get(task)
    return process.pid if process is not None else None


def signal_when_due(proc, run_dir: Path, started: float, fault: dict, seen: set) -> None:
    """Waits for the fault's moment (and its target), signals it, and notes when and in which phase."""
    while proc.poll() is None:
        seen.update(descendants(proc.pid))
        now = time.monotonic()
        if now - started >= fault["planned_at"]:
            pid = proc.pid if fault["target"] == "launcher" else tensorflow_process(proc.pid, fault["target"])
            if pid is not None:
                phase = "training" if training_began(run_dir) else "start-up"
                try:
                    os.kill(pid, getattr(signal, fault["signal"]))
                except ProcessLookupError:
                    continue
                steps = [r.get("global_step") or 0 for r in read_progress(str(run_dir)).values()]
                fault.update(at=round(time.monotonic() - started, 1), time=time.time(), phase=phase, pid=pid,
                             step=max(steps, default=0))
                return
        time.sleep(0.2)


def launch_once(cluster_file: Path, run_dir: Path, overrides, fault=None, started=None, seen=None):
    """One `launch` to its end (or to the launcher's own death): its Launch, and when training began (seconds
    after `started`, as this polls; None when it began while the fault was awaited, or never)."""
    started = time.monotonic() if started is None else started
    seen = set() if seen is None else seen
    output = run_dir / f"launch{len(list(run_dir.glob('launch*.out')))}.out"
    proc = start(launch_command(cluster_file, run_dir, overrides, quiet=True), output, new_session=False)
    if fault is not None:
        signal_when_due(proc, run_dir, started, fault, seen)
    first_step_at = None
    while proc.poll() is None:
        seen.update(descendants(proc.pid))
        if first_step_at is None and training_began(run_dir):
            first_step_at = time.monotonic() - started
        time.sleep(0.5)
    run = Launch(run_dir, started, time.monotonic(), proc.returncode, output.read_text(errors="replace"))
    return run, first_step_at


def one_run(cluster_file: Path, workdir: Path, overrides, fault=None, baseline=None) -> dict:
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    started, seen = time.monotonic(), set()
    run, first_step_at = launch_once(cluster_file, run_dir, overrides, fault, started, seen)
    result = {"fault": fault, "first_step_at": first_step_at}
    if fault and fault["target"] == "launcher" and "at" in fault:
        time.sleep(LEFTOVER_WAIT_SECS)  # not counted as lost: a user's own pause before launching again
        result.update(waited=LEFTOVER_WAIT_SECS, left_after_launcher_kill=living_pids(seen))
        result["resumed_from"] = latest_step(str(run_dir / "model"))
        run, _ = launch_once(cluster_file, run_dir, overrides, None, started, seen)  # as a user would: again
    summary = run.summary()
    restarts = summary.get("restarts", [])
    answered = restarts[0]["seconds_since_launch"] if restarts and fault and "at" in fault else None
    result.update(exit=run.returncode, seconds=round(run.exited - run.launched, 1),
                  accuracy=summary.get("accuracy"), global_step=summary.get("global_step"),
                  restarts=[f"{r.get('failed_task')}: {r.get('reason')}" for r in restarts],
                  answered_after=round(answered - fault["at"], 1) if answered is not None else None,
                  leftover=living_pids(seen | set(summary.get("all_pids", []))), summary=summary,
                  last_line=run.output.strip().splitlines()[-1] if run.output.strip() else "")
    if fault is not None:
        result["cost"] = cost(result, run_dir, baseline)
    return result


def cost(run: dict, run_dir: Path, baseline: dict) -> dict:
    """The seconds a fault cost, from the run's own records, so that a change in the machine's load between runs
    does not count: the hang until the launcher answered; its restart, until the restarted chief's first step;
    the steps redone, at the run's own pace. An evaluator restarted alone costs only a later final evaluation."""
    fault, summary = run["fault"], run["summary"]
    chief = read_progress(str(run_dir)).get("chief:0") or {}
    if "time" not in fault or not chief.get("first_step_time") or chief.get("local_step", 0) < 2:
        return {}
    pace = (chief["time"] - chief["first_step_time"]) / (chief["local_step"] - 1)
    restarts = summary.get("restarts") or [{}]
    if restarts[0].get("restarted_tasks") == ["evaluator:0"]:
        # The chief exits once the final checkpoint is evaluated: from the last step to the exit, against the baseline.
        late = (summary["seconds_to_exit"] - summary["seconds_to_last_step"]) - (
            baseline["seconds_to_exit"] - baseline["seconds_to_last_step"])
        return {"lost": round(max(0.0, late), 1), "final_evaluation_later_by": round(late, 1)}
    if fault["target"] == "launcher":
        hang, restart_at, redo = 0.0, fault["time"] + run.get("waited", 0), fault["step"] - (run["resumed_from"] or 0)
    else:
        restart_at = summary["launch_time"] + restarts[0]["seconds_since_launch"]
        hang, redo = restart_at - fault["time"], restarts[0].get("steps_redone", 0)
    parts = {"hang": hang, "restart_to_first_step": chief["first_step_time"] - restart_at, "redo": redo * pace}
    return {"lost": round(sum(parts.values()), 1), **{k: round(v, 1) for k, v in parts.items()},
            "steps_redone": redo, "seconds_per_step": round(pace, 3)}


def plan_faults(count: int, first_step: float, window: float, rng: random.Random) -> list:
    """Every kind in turn, in a shuffled order; every other fault during start-up (before the baseline's first
    step), the others at any moment up to `window`."""
    kinds = rng.sample(KINDS, len(KINDS)) * (count // len(KINDS) + 1)
    return [{"signal": s, "target": t, "planned_at": round(rng.uniform(1.0, first_step if n % 2 == 0 else window), 1)}
            for n, (s, t) in enumerate(kinds[:count])]


def report(number: int, run: dict, baseline: dict) -> None:
    fault, figures = run["fault"], run["cost"]
    parts = ", ".join(f"{k} {v}" for k, v in figures.items() if k != "lost")
    print(f"fault {number}: {fault['signal']} {fault['target']} at {fault.get('at')}s, step {fault.get('step')} "
          f"({fault.get('phase')}): answered after {run['answered_after']}s; cost {figures.get('lost')}s ({parts}); "
          f"wall clock {run['seconds'] - baseline['seconds'] - run.get('waited', 0):+.0f}s against the baseline; "
          f"exit={run['exit']} accuracy={run['accuracy']} step={run['global_step']} restarts={run['restarts']} "
          f"leftover={run['leftover']}"
          + (f" left_after_launcher_kill={run['left_after_launcher_kill']}; launched again, resumed from "
             f"checkpoint {run['resumed_from']}" if "left_after_launcher_kill" in run else ""), flush=True)


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, "also write the runs here")
    parser.add_argument("--cluster", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--faults", type=int, default=8)
    parser.add_argument("--stall", type=int, default=60, help="launcher.stall_timeout_secs for every run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    overrides = [f"launcher.stall_timeout_secs={args.stall}", "restart.max_restarts=3"]
    with tempfile.TemporaryDirectory(prefix="fault_campaign_") as workdir:
        base = one_run(args.cluster, Path(workdir), overrides)
        print(f"baseline: exit={base['exit']} {base['seconds']}s accuracy={base['accuracy']} "
              f"step={base['global_step']}", flush=True)
        runs = []
        first_step = base["first_step_at"] or 10.0
        for number, fault in enumerate(plan_faults(args.faults, first_step, 0.8 * base["seconds"], rng), start=1):
            runs.append(one_run(args.cluster, Path(workdir), overrides, fault, base["summary"]))
            report(number, runs[-1], base)
    if args.json:
        write_json(args.json, {"baseline": base, "runs": runs})
    accuracies = [r["accuracy"] for r in runs if r["accuracy"] is not None]
    lost = {kind: [r["cost"].get("lost") or 0 for r in runs if r["fault"]["signal"] == kind]
            for kind in ("SIGKILL", "SIGSTOP")}
    result = (f"RESULT faults={len(runs)} finished={sum(r['exit'] == 0 for r in runs)} "
              f"min_accuracy={min(accuracies) if accuracies else 'none'} "
              f"max_lost_kill={max(lost['SIGKILL'], default=0):.0f} max_lost_stop={max(lost['SIGSTOP'], default=0):.0f} "
              f"stall_timeout={args.stall} "
              f"leftover={sum(len(r['leftover']) + len(r.get('left_after_launcher_kill', [])) for r in runs)}")
    record_run(args, "fault_campaign", figures_of(result) | fault_figures(runs, base, accuracies))
    print(result)
    return 0


def fault_figures(runs: list, base: dict, accuracies: list) -> dict:
    """Beside the RESULT line's figures: the fault-free run, the best accuracy, and each kind of fault's cost in
    seconds (`lost_<signal>_<target>`, the largest when a kind came twice), as the docs' table shows them."""
    figures = {"baseline_seconds": base["seconds"], "max_accuracy": max(accuracies, default=None)}
    for run in runs:
        key = f"lost_{run['fault']['signal'].lower()}_{run['fault']['target'].split(':')[0]}"
        figures[key] = max(figures.get(key) or 0, run["cost"].get("lost") or 0)
    return figures


if __name__ == "__main__":
    sys.exit(main())
