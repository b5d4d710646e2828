"""The default run's time to 99.2%, split into training, the checkpoint's save, the wait for the evaluator and its
evaluation: one default run (config/local.yaml: a chief, a worker and an evaluator) per seed.

Per seed: the step and the seconds after the first training step at which 99.2% was first evaluated (the
`estimator-mnist summary` figure), and that time split four ways from the run's records: training (the first
step to the start of that checkpoint's save), the save (the chief's progress record, `saves`), the wait (the
save's end to the start of its evaluation, eval_results.jsonl's `started`) and the evaluation (its start to its
score, `time`). Then every evaluation's save -> start gap, the accuracy evaluated at step 120 (the target's step),
the final accuracy, and the means; the CPU kind is named on the first and last lines.

    flock /work/coord/cpu.lock .venv/bin/python benchmarks/time_to_accuracy.py --seeds 5
    RESULT cpu=... mean_seconds_992=... mean_step_992=... steps_992=[...] seconds_992=[...] finals=[...]
           worst_final=... accuracies_120=[...] mean_accuracy_120=... max_gap_ms=... mean_training=... mean_save=...
           mean_wait=... mean_evaluation=... seeds=5

--set KEY=VALUE changes the runs' config (e.g. a schedule to try); --seeds N runs seeds 1..N.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import List, Optional

from common import DEFAULT_CONFIG, Shape, benchmark_parser, run_launch, write_json
from results import cpu_identity, figures_of, record_run

from estimator_mnist.model_files import checkpoints
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.supervise.run_summary import collect, locate

THRESHOLD = 0.992
TARGET_STEP = 120  # issue 61: 99.2% by step 120 (61,440 images), in the mean of the seeds


def split_of(evaluations: List[dict], saves: List[list], first_step: Optional[float]) -> dict:
    """The crossing's training, save, wait and evaluation seconds, and every evaluation's save -> start gap (s)."""
    saved = {step: (started, ended) for step, started, ended in saves}
    gaps = [round(r["started"] - saved[r["global_step"]][1], 3) for r in evaluations
            if r.get("started") is not None and r["global_step"] in saved]
    hit = next((r for r in evaluations if r["accuracy"] >= THRESHOLD), None)
    parts = {"training": None, "save": None, "wait": None, "evaluation": None}
    if hit is not None and hit["global_step"] in saved and hit.get("started") is not None and first_step:
        started, ended = saved[hit["global_step"]]
        parts = {"training": started - first_step, "save": ended - started, "wait": hit["started"] - ended,
                 "evaluation": hit["time"] - hit["started"]}
    return {**{key: value if value is None else round(value, 3) for key, value in parts.items()}, "gaps": gaps}


def one_run(workdir: Path, seed: int, data_dir: Optional[str], overrides: List[str]) -> dict:
    run = run_launch(workdir, f"seed{seed}_", DEFAULT_CONFIG, [f"training.seed={seed}", *overrides],
                     Shape(chief=1, workers=1, evaluator=True), data_dir, timeout=900).check(f"the run of seed {seed}")
    facts = collect(str(run.run_dir))
    _, model_dir, records_dir = locate(str(run.run_dir))
    records = read_progress(records_dir) if records_dir else {}
    saves = [save for record in records.values() for save in record.get("saves", [])]
    evaluations = checkpoints.read_eval_results(str(model_dir))
    if not saves or any(r.get("started") is None for r in evaluations):
        raise SystemExit(f"the run of seed {seed} in {run.run_dir} recorded no save times (progress/chief-0.json's "
                         "`saves`) or no evaluation starts (eval_results.jsonl's `started`): is this the code that "
                         "writes them?")
    hit = facts["seconds_to_accuracy"][f"{THRESHOLD:g}"]
    first_step = min((r["first_step_time"] for r in records.values() if r.get("first_step_time")), default=None)
    return {"seed": seed, "step_992": hit and hit["step"], "seconds_992": hit and round(hit["seconds"], 2),
            "final": facts["accuracy"], "run_dir": str(run.run_dir), **split_of(evaluations, saves, first_step),
            "evaluations": [[r["global_step"], r["accuracy"]] for r in evaluations],
            "accuracy_120": next((r["accuracy"] for r in evaluations if r["global_step"] == TARGET_STEP), None)}


def mean(values, digits: int = 3) -> Optional[float]:
    values = list(values)
    return round(statistics.mean(values), digits) if values and None not in values else None


def _reported(seed: int, run: dict) -> dict:
    """Prints one seed's split as soon as it is measured (a 5-seed run takes minutes), and returns it."""
    print(f"seed {seed}: 99.2% first evaluated at step {run['step_992']}, {run['seconds_992']} s after the first "
          f"step (training {run['training']} s, save {run['save']} s, wait {run['wait']} s, evaluation "
          f"{run['evaluation']} s); final {run['final']}; save->evaluation-start gaps {run['gaps']} s; "
          f"evaluations {run['evaluations']}", flush=True)
    return run


def main() -> None:
    parser = benchmark_parser(__doc__, not_measured=("data_dir",))
    parser.add_argument("--seeds", type=int, default=5, help="runs, with seeds 1..N (default 5)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every run (repeatable)")
    parser.add_argument("--data-dir", default=None, help="a prepared MNIST (default: the config's)")
    args = parser.parse_args()
    cpu = cpu_identity()
    kind = f"{cpu['model_name']} family {cpu['family']} model {cpu['model']} ({cpu['kind']}, {cpu['cpus']} CPUs)"
    print(f"CPU: {kind}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="time_to_accuracy_"))
    runs = [_reported(seed, one_run(workdir, seed, args.data_dir, args.overrides)) for seed in range(1, args.seeds + 1)]
    if args.json:
        write_json(args.json, runs)
    gaps = [gap for run in runs for gap in run["gaps"]]
    finals = [run["final"] for run in runs]
    line = (f"RESULT cpu={cpu['vendor']}/{cpu['family']}/{cpu['model']}/{cpu['kind']} "
            f"mean_seconds_992={mean(r['seconds_992'] for r in runs)} mean_step_992={mean(r['step_992'] for r in runs)} "
            f"steps_992={json.dumps([r['step_992'] for r in runs], separators=(',', ':'))} "
            f"seconds_992={json.dumps([r['seconds_992'] for r in runs], separators=(',', ':'))} "
            f"finals={json.dumps(finals, separators=(',', ':'))} "
            f"worst_final={min(finals) if None not in finals else None} "
            f"accuracies_120={json.dumps([r['accuracy_120'] for r in runs], separators=(',', ':'))} "
            f"mean_accuracy_120={mean((r['accuracy_120'] for r in runs), digits=5)} "
            f"max_gap_ms={round(1000 * max(gaps)) if gaps else None} "
            + " ".join(f"mean_{part}={mean(r[part] for r in runs)}" for part in ("training", "save", "wait", "evaluation"))
            + f" seeds={args.seeds}")
    record_run(args, "time_to_accuracy", figures_of(line))
    print(f"CPU: {kind}", flush=True)
    print(line, flush=True)


if __name__ == "__main__":
    main()
