"""`estimator-mnist summary RUN_DIR`: a run's outcome from the records it left, however it was started.

A run directory of `launch` holds run_summary.json (status, restarts) and
the trainers' progress records; any model_dir holds eval_results.jsonl and
the checkpoints. Without progress records (a task started elsewhere, a pod
whose run_dir is gone), the first step and images/s come from the training
run's TensorBoard events, read with TensorBoard's own reader.
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional

from estimator_mnist import storage
from estimator_mnist.errors import UsageError
from estimator_mnist.model_files import checkpoints, layout
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.model_files.run_dir import launch_summary
from estimator_mnist.startup_noise import before_import
from estimator_mnist.storage.urls import check_url

THRESHOLDS = (0.98, 0.99, 0.992)
ERR_NOT_A_RUN = ("{path}: neither a run directory nor a model_dir (no run_summary.json, eval_results.jsonl or "
                 "checkpoint there or in {path}/model); give the run_dir or model_dir of a run")


def locate(path: str):
    """(launcher summary or {}, model_dir, the directory of the progress records or None) for a run directory
    or a model_dir, local or gs:// (a run directory is local; with a bucket model_dir the records are there:
    Config.records_dir). Another scheme: one line naming gs://."""
    base = check_url(path, "summary", "RUN_DIR") or path
    storage.check_bucket(base)  # a bucket that does not exist, or no credentials: one line, exit 2
    launched = launch_summary(base)
    candidates = [launched["model_dir"]] if launched.get("model_dir") else []
    model_dir = next((str(d) for d in candidates + [base, layout.default_model_dir(base)]
                      if checkpoints.has_evaluations(d) or checkpoints.has_state(d)), None)
    if model_dir is None:
        raise UsageError(ERR_NOT_A_RUN.format(path=path))
    records_dir = layout.records_dir(model_dir, launched.get("run_dir") or base)
    return launched, model_dir, records_dir if storage.isdir(layout.progress_dir(records_dir)) else None


def steady_rate(record: dict) -> Optional[float]:
    """A trainer's images/s from its first to its newest timed step."""
    times, per_step = record.get("step_times") or [], record.get("examples_per_step")
    if len(times) < 2 or not per_step or times[-1][1] <= times[0][1]:
        return None
    return (times[-1][0] - times[0][0]) * per_step / (times[-1][1] - times[0][1])


def from_events(model_dir: str) -> dict:
    """First-step time and images/s of the training run from its TensorBoard events (imports TensorFlow)."""
    before_import()
    from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=import-outside-toplevel

    events = event_accumulator.EventAccumulator(str(model_dir), size_guidance={event_accumulator.SCALARS: 0})
    events.Reload()
    tags = events.Tags().get("scalars", [])
    first = min((events.Scalars(t)[0].wall_time for t in tags if events.Scalars(t)), default=None)
    rates = [e.value for e in events.Scalars("images_per_sec")] if "images_per_sec" in tags else []
    return {"first_step_time": first, "images_per_sec": sum(rates) / len(rates) if rates else None, "per_task": {}}


def collect(path: str) -> dict:
    launched, model_dir, records_dir = locate(path)
    records = read_progress(records_dir) if records_dir else {}
    # the logs' (local) directory
    run_dir = launched.get("run_dir") if layout.records_in_model_dir(model_dir) else records_dir
    return facts_of(str(model_dir), checkpoints.read_eval_results(str(model_dir)), records, launched, run_dir)


def facts_of(model_dir: str, evaluations: List[dict], records: Dict[str, dict], launched: Optional[dict] = None,
             run_dir=None) -> dict:
    """A run's outcome from its evaluations (oldest first) and its trainers' progress records (none: from its
    TensorBoard events); `launched` is launch's run summary, when there is one."""
    launched = launched or {}
    if records:
        per_task = {name: steady_rate(r) for name, r in sorted(records.items())}
        first = min((r["first_step_time"] for r in records.values() if r.get("first_step_time")), default=None)
        timing = {"first_step_time": first, "per_task": {k: v for k, v in per_task.items() if v},
                  "images_per_sec": sum(v for v in per_task.values() if v) or None}
    else:
        timing = from_events(model_dir)
    if launched.get("launch_time") and launched.get("seconds_to_first_step") is not None:
        # The launcher saw the first step of the first attempt; the records belong to the newest one.
        timing["first_step_time"] = launched["launch_time"] + launched["seconds_to_first_step"]
    first = timing["first_step_time"]
    final = next((r for r in reversed(evaluations) if r.get("final")), None)
    status = launched.get("status") or ("finished" if final else "unfinished (no final evaluation recorded)")
    reached = {}
    for threshold in THRESHOLDS:
        hit = next((r for r in evaluations if r["accuracy"] >= threshold), None)
        reached[f"{threshold:g}"] = ({"step": hit["global_step"], "seconds": hit["time"] - first}
                                     if hit and first and hit.get("time") else None)
    exports = [r["export"] for r in evaluations if r.get("export")]
    precision = next((r["precision"] for _, r in sorted(records.items()) if r.get("precision")), None)
    return {
        "run_dir": run_dir, "model_dir": model_dir, "status": status,
        "global_step": checkpoints.latest_step(model_dir),
        "accuracy": (final or (evaluations[-1] if evaluations else {})).get("accuracy"),
        "validation_accuracy": (final or (evaluations[-1] if evaluations else {})).get("validation_accuracy"),
        "images_per_sec": timing["images_per_sec"], "images_per_sec_by_task": timing["per_task"],
        "precision": precision,
        "restarts": len(launched["restarts"]) if "restarts" in launched else None,
        "export": exports[-1] if exports else None, "seconds_to_accuracy": reached,
        "evaluations": [{"step": r["global_step"], "accuracy": r["accuracy"], "loss": r["loss"],
                         "validation_accuracy": r.get("validation_accuracy"),
                         "validation_loss": r.get("validation_loss"),
                         "seconds": r["time"] - first if first and r.get("time") else None} for r in evaluations],
    }


def _figure(value: Optional[float], missing: str = "-") -> str:
    return f"{value:.4f}" if value is not None else missing


def _seconds(value: Optional[float]) -> str:
    return f"{value:.1f} s" if value is not None else "-"


def table(facts: dict) -> List[str]:
    rate = facts["images_per_sec"]
    by_task = ", ".join(f"{k} {v:,.0f}" for k, v in facts["images_per_sec_by_task"].items())
    rows: Dict[str, str] = {
        "model_dir": facts["model_dir"], "status": facts["status"],
        "global step": str(facts["global_step"]),
        "test accuracy": f"{facts['accuracy']:.4f}" if facts["accuracy"] is not None else "-",
        "validation accuracy": _figure(facts.get("validation_accuracy"), "- (no validation split)"),
        "images/s": (f"{rate:,.0f}" + (f" ({by_task})" if by_task else "")) if rate else "-",
        "precision": facts.get("precision") or "-",
        "restarts": str(facts["restarts"]) if facts["restarts"] is not None else "- (not started by launch)",
        "export": facts["export"] or "-",
    }
    for threshold, hit in facts["seconds_to_accuracy"].items():
        rows[f"to {float(threshold):.1%}"] = f"{hit['seconds']:.1f} s (step {hit['step']})" if hit else "not reached"
    width = max(len(k) for k in rows)
    lines = [f"{key:<{width}}  {value}" for key, value in rows.items()]
    held_out = any(e.get("validation_accuracy") is not None for e in facts["evaluations"])
    validation_header = f"  {'val acc':>8}  {'val loss':>8}" if held_out else ""
    lines += ["", f"{'step':>6}  {'test acc':>8}  {'loss':>7}{validation_header}  seconds after the first step"]
    lines += [f"{e['step']:>6}  {e['accuracy']:>8.4f}  {e['loss']:>7.4f}"
              + (f"  {_figure(e.get('validation_accuracy')):>8}  {_figure(e.get('validation_loss')):>8}" if held_out
                 else "") + f"  {_seconds(e['seconds'])}"
              for e in facts["evaluations"]]
    return lines


def print_summary(path: str, as_json: bool, out) -> int:
    facts = collect(path)
    print(json.dumps(facts, indent=1) if as_json else "\n".join(table(facts)), file=out)
    return 0
