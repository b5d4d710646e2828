"""Backup workers in synchronous parameter-server training: does a straggler slow the global step?

Runs config/ps_sync_backup.yaml's cluster (chief + 2 workers + 1 ps, so 3
workers) three ways, on fresh loopback ports and a fresh model_dir each time:

  no_straggler   replicas_to_aggregate 2, nobody slowed
  backup         replicas_to_aggregate 2, worker:1 slowed by --delay-ms per step
  no_backup      replicas_to_aggregate 3, worker:1 slowed the same way

and prints the steady-state global step rate of each (the chief's
global_step/sec lines after the first --skip), the ratios to no_straggler, and
a last machine-readable line:

  RESULT backup_over_no_straggler=... no_backup_over_no_straggler=...

With a backup worker the straggler's late gradients are dropped, so the first
ratio should stay near 1 (at least 2/3); without one, every step waits for it.

  .venv/bin/python benchmarks/backup_workers.py [--steps 300] [--delay-ms 500] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from estimator_mnist.cluster import free_loopback_ports as free_ports  # noqa: E402
from estimator_mnist.config import default_data_dir  # noqa: E402

TEMPLATE = """
cluster:
  chief: ["localhost:{p0}"]
  worker: ["localhost:{p1}", "localhost:{p2}"]
  ps: ["localhost:{p3}"]
strategy: {{name: parameter_server_sync, replicas_to_aggregate: {r2a}}}
tasks:
  worker:1: {{step_delay_ms: {delay}}}
training: {{max_steps: {steps}, save_checkpoints_steps: {steps}, log_step_count_steps: 20}}
launcher: {{stall_timeout_secs: 600}}
run_dir: {run_dir}
data_dir: {data_dir}
"""
RATE = re.compile(r"global_step/sec: ([\d.]+)")
VARIANTS = (("no_straggler", 2, False), ("backup", 2, True), ("no_backup", 3, True))


def run_variant(workdir: Path, r2a: int, delay_ms: int, steps: int, skip: int) -> dict:
    for _ in range(3):
        ports = dict(zip(("p0", "p1", "p2", "p3"), free_ports(4)))
        run_dir = Path(tempfile.mkdtemp(dir=workdir))
        path = run_dir / "cluster.yaml"
        path.write_text(TEMPLATE.format(r2a=r2a, delay=delay_ms, steps=steps, run_dir=run_dir,
                                        data_dir=default_data_dir(), **ports))
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(path), "--quiet"],
                              cwd=REPO, capture_output=True, text=True)
        if proc.returncode == 2 and "already in use" in proc.stdout + proc.stderr:
            continue
        if proc.returncode != 0:
            raise SystemExit(f"run failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        summary = json.loads((run_dir / "run_summary.json").read_text())
        chief_log = Path(summary["tasks"]["chief:0"]["log"]).read_text(errors="replace")
        rates = [float(r) for r in RATE.findall(chief_log)][skip:]
        if not rates:
            raise SystemExit(f"no steady-state global_step/sec lines in {summary['tasks']['chief:0']['log']}; "
                             f"raise --steps")
        local = {t: int(m) for t, m in re.findall(r"task (\S+) ran (\d+) local steps",
                                                  "".join(Path(v["log"]).read_text(errors="replace")
                                                          for v in summary["tasks"].values()))}
        return {"steps_per_sec": statistics.median(rates), "seconds": time.monotonic() - started, "local_steps": local}
    raise SystemExit("no free ports after 3 attempts")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--delay-ms", type=int, default=500, help="per-step sleep of the straggler, worker:1")
    parser.add_argument("--skip", type=int, default=2, help="global_step/sec lines left out as warm-up")
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant, alternating; medians are reported")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    results = {name: [] for name, _, _ in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="backup_workers_") as workdir:
        for _ in range(args.repeat):
            for name, r2a, slowed in VARIANTS:
                result = run_variant(Path(workdir), r2a, args.delay_ms if slowed else 0, args.steps, args.skip)
                results[name].append(result)
                print(f"{name:13s} r2a={r2a} straggler={'yes' if slowed else 'no '} "
                      f"{result['steps_per_sec']:6.2f} global steps/s  local steps {result['local_steps']}",
                      flush=True)
    rate = {name: statistics.median(r["steps_per_sec"] for r in runs) for name, runs in results.items()}
    print(f"\n{'variant':13s} {'global steps/s':>15s} {'ratio':>7s}")
    for name in rate:
        print(f"{name:13s} {rate[name]:15.2f} {rate[name] / rate['no_straggler']:7.2f}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "runs": results,
                                         "median_steps_per_sec": rate}, indent=2))
    print(f"RESULT backup_over_no_straggler={rate['backup'] / rate['no_straggler']:.3f} "
          f"no_backup_over_no_straggler={rate['no_backup'] / rate['no_straggler']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
