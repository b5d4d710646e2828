"""What the Keras comparison prints and saves: its table, the pipeline and default-run lines, the JSON file
and the RESULT line."""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import time
from pathlib import Path
from typing import List, Optional

from common import DEFAULT_CONFIG, REPO, write_json
from comparison_figures import Run, paired, ratios, stats, window

FIGURES = (("images_per_sec", "steady images/s (summed)", 0), ("seconds_to_first_step", "launch to first step, s", 1),
           ("seconds_to_last_step", "launch to last step, s", 1), ("seconds_to_exit", "launch to exit, s", 1),
           ("accuracy", "test accuracy", 4))


def _cell(values: List[float], digits: int) -> str:
    if not values:
        return "-"
    s = stats(values)
    return (f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})" if len(values) > 1
            else f"{s['median']:.{digits}f}")


def _rows(workers: int, runs: List[Run], reference: List[Run], label: str, reference_cell: Optional[str]) -> List[str]:
    """One row per figure: `runs` against `reference`, with their ratio per repetition."""
    lines = []
    for key, name, digits in FIGURES:
        a = [getattr(r, key) for r in runs]
        b = [getattr(r, key) for r in reference]
        theirs = reference_cell or _cell([v for v in b if v is not None], digits)
        lines.append(f"| {workers} | {label}{name} | {_cell([v for v in a if v is not None], digits)} | "
                     f"{theirs} | {_cell(ratios(a, b), 2)} |")
    return lines


def table(runs: List[Run], defaults_label: str) -> List[str]:
    lines = ["| workers | figure | trainer | Keras reference | trainer / reference |",
             "| --- | --- | --- | --- | --- |"]
    for workers in sorted({r.workers for r in runs}):
        def of(system):
            return [r for r in runs if r.system == system and r.workers == workers]

        lines += _rows(workers, of("trainer"), of("reference"), "", None)
        if of("trainer_defaults"):
            lines += _rows(workers, of("trainer_defaults"), of("reference"), f"{defaults_label}: ", "(float32 above)")
    return lines


def machine() -> str:
    return f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), Python {platform.python_version()}"


def print_report(args, lines: List[str], pipeline: dict, default: Optional[dict]) -> None:
    """The table and the lines under it, for a reader."""
    print(f"\n{time.strftime('%Y-%m-%d')}, {machine()}; {args.repeats} repetition(s) of {args.steps} steps, "
          f"steady window {window(args.steps, args.warmup)}, {args.threads} intra/inter-op thread(s) per task "
          f"in the like-for-like runs; median (min-max)\n")
    print("\n".join(lines))
    print(f"\ninput pipeline alone (input_fn, no model, one thread, one of {args.pipeline_shards} shards), images/s: "
          + "; ".join(f"batch {b}: first epoch {v['first_epoch']:.0f}, cached {v['cached']:.0f}"
                      for b, v in pipeline.items()))
    if default:
        time_to_99 = default["time_to_99"] if default["time_to_99"] is None else round(default["time_to_99"], 1)
        print(f"default config ({DEFAULT_CONFIG.relative_to(REPO)}, max_steps {default['max_steps']}): "
              f"first step {default['seconds_to_first_step']:.1f} s after launch; "
              f"99.0% after {time_to_99} s (step {default['step_at_99']}); final accuracy "
              f"{default['final_accuracy']:.4f} {default['training_phase_secs']:.1f} s after the first step; "
              f"exit {default['seconds_to_exit']:.1f} s after launch; evaluations (step, accuracy, s) "
              f"{default['evaluations']}")


def report(args, json_path: Path, runs: List[Run], defaults_label: str, pipeline: dict, default: Optional[dict],
           started: float) -> None:
    """Prints the table, writes every figure to the JSON file, and prints the RESULT line last."""
    fp32_ratio = paired(runs, "trainer", "reference", 2)
    bf16_ratio = paired(runs, "trainer_defaults", "reference", 2)
    exit_ratios = [r.seconds_to_exit / r.seconds_to_last_step for r in runs
                   if r.system.startswith("trainer") and r.workers == 2]
    lines = table(runs, defaults_label)
    print_report(args, lines, pipeline, default)
    write_json(json_path, {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "runs": [dataclasses.asdict(r) for r in runs], "table": lines,
        "input_pipeline": pipeline, "default_run": default,
        "fp32_2w_ratios": fp32_ratio, "bf16_2w_ratios": bf16_ratio, "exit_over_last_step": exit_ratios,
        "seconds": time.time() - started})
    print(f"figures: {json_path}")

    def fmt(values, reduce=statistics.median):
        return f"{reduce(values):.3f}" if values else "none"

    time_to_99 = "none" if not default or default["time_to_99"] is None else f"{default['time_to_99']:.1f}"
    print(f"RESULT fp32_2w_ratio={fmt(fp32_ratio)} bf16_2w_ratio={fmt(bf16_ratio)} "
          f"exit_over_last_step={fmt(exit_ratios, max)} time_to_99={time_to_99}")
