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

import re
import statistics
import sys
import tempfile
from pathlib import Path

from estimator_mnist.config import default_data_dir
from estimator_mnist.model_files.progress import read_progress

from common import Shape, benchmark_parser, run_launch, write_json
from results import figures_of, record_run

# Everything the variants share; the cluster (fresh ports each run) and what they vary come with --set.
SETTINGS = {"strategy": {"name": "parameter_server_sync"},
            "training": {"log_step_count_steps": 20},
            "launcher": {"stall_timeout_secs": 600}}
SHAPE = Shape(chief=1, workers=2, ps=1)
RATE = re.compile(r"global_step/sec: ([\d.]+)")
VARIANTS = (("no_straggler", 2, False), ("backup", 2, True), ("no_backup", 3, True))


def run_variant(workdir: Path, settings: Path, r2a: int, delay_ms: int, steps: int, skip: int) -> dict:
    overrides = [f"strategy.replicas_to_aggregate={r2a}", f"tasks.worker:1.step_delay_ms={delay_ms}",
                 f"training.max_steps={steps}", f"training.save_checkpoints_steps={steps}"]
    run = run_launch(workdir, f"r2a{r2a}_", settings, overrides, SHAPE, default_data_dir()).check("the run")
    chief_log = Path(run.summary()["tasks"]["chief:0"]["log"])
    rates = [float(r) for r in RATE.findall(chief_log.read_text(errors="replace"))][skip:]
    if not rates:
        raise SystemExit(f"no steady-state global_step/sec lines in {chief_log}; raise --steps")
    local = {task: record["local_step"] for task, record in read_progress(str(run.run_dir)).items()}
    return {"steps_per_sec": statistics.median(rates), "seconds": run.exited - run.launched, "local_steps": local}


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--delay-ms", type=int, default=500, help="per-step sleep of the straggler, worker:1")
    parser.add_argument("--skip", type=int, default=2, help="global_step/sec lines left out as warm-up")
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant, alternating; medians are reported")
    args = parser.parse_args(argv)
    results = {name: [] for name, _, _ in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="backup_workers_") as workdir:
        settings = Path(workdir, "settings.yaml")
        write_json(settings, SETTINGS)  # JSON is YAML
        for _ in range(args.repeat):
            for name, r2a, slowed in VARIANTS:
                result = run_variant(Path(workdir), settings, r2a, args.delay_ms if slowed else 0, args.steps,
                                     args.skip)
                results[name].append(result)
                print(f"{name:13s} r2a={r2a} straggler={'yes' if slowed else 'no '} "
                      f"{result['steps_per_sec']:6.2f} global steps/s  local steps {result['local_steps']}",
                      flush=True)
    rate = {name: statistics.median(r["steps_per_sec"] for r in runs) for name, runs in results.items()}
    print(f"\n{'variant':13s} {'global steps/s':>15s} {'ratio':>7s}")
    for name in rate:
        print(f"{name:13s} {rate[name]:15.2f} {rate[name] / rate['no_straggler']:7.2f}")
    if args.json:
        write_json(args.json, {"args": vars(args) | {"json": str(args.json)}, "runs": results,
                               "median_steps_per_sec": rate})
    result = (f"RESULT backup_over_no_straggler={rate['backup'] / rate['no_straggler']:.3f} "
              f"no_backup_over_no_straggler={rate['no_backup'] / rate['no_straggler']:.3f}")
    record_run(args, "backup_workers", figures_of(result))
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
