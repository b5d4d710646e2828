"""What `estimator-mnist ensemble` reports: the members and the ensemble, on the validation split that chose
them and on the test set that did not, their devices and what those mean, in sweep.json and on the console."""

from __future__ import annotations

import time
from typing import Dict, List, Optional

from estimator_mnist.mnist_data import splits
from estimator_mnist.tf_model.ensemble_plan import EnsemblePlan
from estimator_mnist.sweep import records

CPU_ONLY = ("every member is on /device:CPU:0: without GPUs, 'one device per member' is one device, the machine's "
            "cores, which the members share in turn; on a machine with a GPU per member each member has a GPU of its "
            "own and the members compute side by side")
LOGICAL_CPUS = ("the members are on logical CPU devices ({devices}) of one process: TensorFlow cuts them from the "
                "same cores, so the members still share those cores; only GPUs give each member hardware of its own")
OWN_GPUS = "each member has a GPU of its own ({devices}): the members compute side by side"
SHARED_GPUS = ("{members} members on {count} device(s) ({devices}): members beyond the first {count} share a device "
               "with an earlier one")


def devices_note(devices: List[str]) -> str:
    """What the members' placement means on this machine, said plainly."""
    distinct = sorted(set(devices))
    text = ", ".join(distinct)
    if all("CPU" in d for d in distinct):
        return CPU_ONLY if distinct == ["/device:CPU:0"] else LOGICAL_CPUS.format(devices=text)
    if len(distinct) == len(devices):
        return OWN_GPUS.format(devices=text)
    return SHARED_GPUS.format(members=len(devices), count=len(distinct), devices=text)


def _figure(scores: Dict[str, List[float]], split: str, index: int) -> Optional[float]:
    return round(scores[split][index], 6) if split in scores else None


def _selection_facts(plan: EnsemblePlan, facts: dict) -> dict:
    selection = facts["selection"]
    if selection is None:
        return {"selection": "top", "top": len(plan.members)}
    return {"selection": "greedy", "candidates": [m.trial for m in plan.members],
            "picks": [plan.members[index].trial for index, _ in selection.steps],
            "selection_accuracy": round(selection.accuracy, 6)}


def result_of(plan: EnsemblePlan, facts: dict, export: str) -> dict:
    """sweep.json's `ensemble`: `accuracy` is the test set's, as everywhere; `validation_accuracy` chose."""
    scores, members = facts["scores"], facts["members"]
    rows = [{"trial": m.trial, "values": m.values, "weight": m.weight, "device": m.device,
             "devices_in_graph": facts["devices"][m.trial], "accuracy": _figure(scores, splits.TEST, i),
             "validation_accuracy": _figure(scores, splits.VALIDATION, i), "sweep_accuracy": m.sweep_accuracy,
             "sweep_validation_accuracy": m.sweep_validation_accuracy, "checkpoint": m.checkpoint}
            for i, m in enumerate(members)]
    key = "validation_accuracy" if splits.VALIDATION in scores else "accuracy"
    best = max(rows, key=lambda r: r[key])
    return {**_selection_facts(plan, facts), "chosen_on": key,
            "accuracy": _figure(scores, splits.TEST, -1), "validation_accuracy": _figure(scores, splits.VALIDATION, -1),
            "members": rows, "best_member": {k: best[k] for k in ("trial", "validation_accuracy", "accuracy")},
            "devices_note": devices_note([m.device for m in members]), "export": export, "time": time.time(),
            "test_images": facts["images"][splits.TEST], "validation_images": facts["images"].get(splits.VALIDATION)}


def _text(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4f}"


def lines_of(result: dict) -> List[str]:
    rows = result["members"]
    width = max(len("member"), *(len(r["trial"]) for r in rows))
    lines = [f"{'member':<{width}}  weight  {'device':<14}  val_acc  test_acc  values"]
    for r in rows:
        values = " ".join(f"{k}={v}" for k, v in r["values"].items())
        lines.append(f"{r['trial']:<{width}}  {r['weight']:>6}  {r['device']:<14}  {_text(r['validation_accuracy']):>7}"
                     f"  {_text(r['accuracy']):>8}  {values}")
    best, count = result["best_member"], len(rows)
    if result["selection"] == "greedy":
        picks = len(result["picks"])
        how = (f"{picks} pick{'s' if picks > 1 else ''} by greedy selection with replacement (Caruana et al., ICML "
               f"2004) among {len(result['candidates'])} finished trials, on the {result['validation_images']:,} "
               "validation images" + ("; no other pick raised the validation accuracy" if picks == 1 else ""))
    else:
        how = f"the {count} best trials by {records.RANKED_BY[result['chosen_on']]} (--top {count}), weight 1 each"
    lines.append(f"ensemble of {count}: {how}")
    if result["validation_accuracy"] is not None:
        lines.append(f"  validation accuracy {result['validation_accuracy']:.4f} (best member {best['trial']}: "
                     f"{best['validation_accuracy']:.4f})")
    lines.append(f"  test accuracy {result['accuracy']:.4f} on the {result['test_images']:,} test images (best member "
                 f"{best['trial']}: {_text(best['accuracy'])}); "
                 + ("reported, never chosen on" if result["chosen_on"] == "validation_accuracy"
                    else "the members were chosen on it: optimistic"))
    lines.append(f"devices: {result['devices_note']}")
    return lines


def report(plan: EnsemblePlan, facts: dict, export: str, out) -> int:
    result = result_of(plan, facts, export)
    record = records.read_sweep(plan.sweep_dir)
    record["ensemble"] = result
    records.save(plan.sweep_dir, record)
    print("\n".join(lines_of(result)), file=out)
    print(f"export: {export}\n  use it: estimator-mnist predict --model {plan.export_base} FILE...", file=out)
    return 0
