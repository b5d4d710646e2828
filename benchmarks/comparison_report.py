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

from estimator_mnist.plan.cpu import usable_cpus

from common import DEFAULT_CONFIG, REPO, write_json
from cpu_facts import cpu_kind, cpu_model, tf_onednn_by_default, threads_per_core
from comparison_figures import Run, paired, ratios, stats, window
from results import figures_of, record_run

FIGURES = (("images_per_sec", "steady images/s (summed)", 0), ("seconds_to_first_step", "launch to first step, s", 1),
           ("seconds_to_last_step", "launch to last step, s", 1), ("seconds_to_exit", "launch to exit, s", 1),
           ("accuracy", "test accuracy", 4))


def _cell(values: List[float], digits: int) -> str:
    if not values:
        return "-"
    s = stats(values)
    return (f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})" if len(values) > 1
            else f"{s['median']:.{digits}f}")


def _rows(workers: int, runs: List[Run], peers: List[List[Run]], label: str, peer_cell: Optional[str]) -> List[str]:
    """One row per figure: `runs`, then each peer's runs and the ratio of `runs` to it per repetition."""
    lines = []
    for key, name, digits in FIGURES:
        a = [getattr(r, key) for r in runs]
        cells = [_cell([v for v in a if v is not None], digits)]
        for peer in peers:
            b = [getattr(r, key) for r in peer]
            cells += [peer_cell or _cell([v for v in b if v is not None], digits), _cell(ratios(a, b), 2)]
        lines.append(f"| {workers} | {label}{name} | " + " | ".join(cells) + " |")
    return lines


def table(runs: List[Run], defaults_label: str) -> List[str]:
    peers = ["reference"] + (["ddp"] if any(r.system == "ddp" for r in runs) else [])
    names = {"reference": "Keras MWMS", "ddp": "PyTorch DDP"}
    lines = ["| workers | figure | trainer | " + " | ".join(f"{names[p]} | trainer / {names[p]}" for p in peers) + " |",
             "| --- | --- | --- | " + " | ".join("--- | ---" for _ in peers) + " |"]
    for workers in sorted({r.workers for r in runs}):
        def of(system):
            return [r for r in runs if r.system == system and r.workers == workers]

        lines += _rows(workers, of("trainer"), [of(p) for p in peers], "", None)
        if of("trainer_defaults"):
            lines += _rows(workers, of("trainer_defaults"), [of(p) for p in peers], f"{defaults_label}: ",
                           "(float32 above)")
    return lines


def machine() -> str:
    threads = threads_per_core()
    return (f"{cpu_model()} ({cpu_kind()}), {os.cpu_count()} CPUs visible, {len(usable_cpus())} usable, "
            f"{'?' if threads is None else threads} hardware thread(s) per core (the kernel's topology), "
            f"TensorFlow alone computes with oneDNN here: {'yes' if tf_onednn_by_default() else 'no'} "
            f"(the trainer: always), Python {platform.python_version()}")


def _spread(values: List[Optional[float]], digits: int = 1) -> str:
    """median (min-max) of the values; 'not reached' counts as missing and is said."""
    present = [v for v in values if v is not None]
    missing = len(values) - len(present)
    text = _cell(present, digits) if present else "not reached"
    return text + (f", not reached in {missing} of {len(values)}" if missing and present else "")


def print_report(args, lines: List[str], pipeline: dict, defaults: List[dict]) -> None:
    """The table and the lines under it, for a reader."""
    kernels = args.isa or "this CPU's own"
    print(f"\n{time.strftime('%Y-%m-%d')}, {machine()}; {args.repeats} repetition(s) of {args.steps} steps, "
          f"steady window {window(args.steps, args.warmup)}, {args.threads} intra/inter-op thread(s) per task "
          f"in the like-for-like runs; oneDNN kernels: {kernels}, the Keras reference's "
          f"oneDNN: {args.keras_onednn}; median (min-max)\n")
    print("\n".join(lines))
    print(f"\ninput pipeline alone (input_fn, no model, one thread, one of {args.pipeline_shards} shards), images/s: "
          + "; ".join(f"batch {b}: first epoch {v['first_epoch']:.0f}, cached {v['cached']:.0f}"
                      for b, v in pipeline.items()))
    if defaults:
        print(f"default config ({DEFAULT_CONFIG.relative_to(REPO)}), {len(defaults)} run(s), precision "
              f"{sorted({d['precision'] for d in defaults if d['precision']})}, median (min-max): "
              f"first step {_spread([d['seconds_to_first_step'] for d in defaults])} s after launch; "
              f"99.2% first evaluated {_spread([d['time_to_992'] for d in defaults])} s after the first step; "
              f"final accuracy {_spread([d['final_accuracy'] for d in defaults], 4)}; "
              f"exit {_spread([d['exit_after_last_step'] for d in defaults])} s after the last step")
        for d in defaults:
            print(f"  max_steps {d['max_steps']}: evaluations (step, accuracy, s after the first step) "
                  f"{d['evaluations']}")


def _median(values, reduce=statistics.median) -> str:
    values = [v for v in values if v is not None]
    return f"{reduce(values):.3f}" if values else "none"


def result_line(runs: List[Run], defaults: List[dict], isa: Optional[str] = None) -> str:
    """The machine-readable last line: medians over the repetitions (the exit: the worst run); `isa`, oneDNN's
    cap (--isa), ends it as `emulated_isa=`, so that an emulation's figures cannot pass for this CPU's."""
    def of(system, workers):
        return [r for r in runs if r.system == system and r.workers == workers]

    one, two = of("trainer", 1), of("trainer", 2)
    startup = ratios([r.seconds_to_first_step for r in two], [r.seconds_to_first_step for r in of("reference", 2)])
    accuracy_gap = [(b.accuracy - a.accuracy) * 100 for a, b in zip(two, of("reference", 2))
                    if a.accuracy is not None and b.accuracy is not None]
    times = [d["time_to_992"] for d in defaults]
    precision = ",".join(sorted({d["precision"] for d in defaults if d["precision"]})) or "none"
    return (f"RESULT fp32_2w_ratio={_median(paired(runs, 'trainer', 'reference', 2))} "
            f"ddp_2w_ratio={_median(paired(runs, 'trainer', 'ddp', 2))} "
            f"two_over_one={_median(ratios([r.images_per_sec for r in two], [r.images_per_sec for r in one]))} "
            f"startup_ratio={_median(startup)} keras_minus_trainer_points={_median(accuracy_gap)} "
            f"bf16_2w_ratio={_median(paired(runs, 'trainer_defaults', 'reference', 2))} "
            f"exit_after_last_step={_median([d['exit_after_last_step'] for d in defaults], max)} "
            f"time_to_992={_median(times) if None not in times else 'none'} "
            f"final_accuracy={_median([d['final_accuracy'] for d in defaults], min)} "
            f"precision={precision} cpu={cpu_kind()}" + (f" emulated_isa={isa}" if isa else ""))


def more_figures(runs: List[Run], defaults: List[dict]) -> dict:
    """What the results file keeps beside the RESULT line's figures: medians of the 2-worker images/s (like for
    like, and with the defaults), and of the default run's launch to first step; the step each default run first
    reached 99.2% at, the training images by then (median), and the default run's length."""
    def median(values):
        values = [v for v in values if v is not None]
        return round(statistics.median(values), 1) if values else None

    def images(system):
        return median([r.images_per_sec for r in runs if r.system == system and r.workers == 2])

    return {"trainer_2w_images_per_sec": images("trainer"), "defaults_2w_images_per_sec": images("trainer_defaults"),
            "first_step_after_launch": median([d["seconds_to_first_step"] for d in defaults]),
            "steps_at_992": [d["step_at_992"] for d in defaults],
            "images_at_992": median([d.get("images_at_992") for d in defaults]),
            "default_max_steps": defaults[0]["max_steps"] if defaults else None}


def report(args, json_path: Path, runs: List[Run], defaults_label: str, pipeline: dict, defaults: List[dict],
           started: float) -> None:
    """Prints the table, writes every figure to the JSON file and, but for a smoke run, to the results file, and
    prints the RESULT line last."""
    lines = table(runs, defaults_label)
    print_report(args, lines, pipeline, defaults)
    write_json(json_path, {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(), "cpu_kind": cpu_kind(),
        "cpu_model": cpu_model(), "args": {k: str(v) for k, v in vars(args).items()},
        "runs": [dataclasses.asdict(r) for r in runs], "table": lines,
        "input_pipeline": pipeline, "default_runs": defaults,
        "fp32_2w_ratios": paired(runs, "trainer", "reference", 2), "ddp_2w_ratios": paired(runs, "trainer", "ddp", 2),
        "bf16_2w_ratios": paired(runs, "trainer_defaults", "reference", 2), "seconds": time.time() - started})
    print(f"figures: {json_path}")
    line = result_line(runs, defaults, args.isa)
    if not args.smoke:
        record_run(args, "keras_comparison", figures_of(line) | more_figures(runs, defaults))
    print(line)
