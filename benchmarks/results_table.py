"""The tables of docs/performance.md and docs/fault_tolerance.md, made from the benchmark results file
(benchmarks/results.py).

Each table shows the newest line per benchmark, CPU and variant (the flags that
changed what was measured): today's figures, with the date and the commit
they were measured at. The file keeps every line; this shows the newest.

  .venv/bin/python benchmarks/results_table.py            # print the tables
  .venv/bin/python benchmarks/results_table.py --write    # rewrite them in the docs (DOCS)

In the doc, each table sits between `<!-- results_table.py: NAME -->` and
`<!-- /results_table.py -->`, NAME one of the views below; a unit test checks
that the doc's tables are what this script makes of the committed file.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from estimator_mnist.errors import USAGE_EXIT_CODE

from results import REPO, RESULTS_FILE, read_results

DOCS = ("performance.md", "fault_tolerance.md")  # under docs/: every view's table is in one of them
BLOCK = re.compile(r"(<!-- results_table\.py: (\w+) -->\n)(.*?)(<!-- /results_table\.py -->)", re.S)
KINDS = ("amx", "avx512_bf16", "avx512", "avx2", "other")
UNKNOWN_TABLE = "unknown table '{name}'; the tables are: {names}"
NO_BLOCK = ("no block for the table '{name}': add <!-- results_table.py: {name} --> and <!-- /results_table.py --> "
            "on lines of their own")


@dataclasses.dataclass(frozen=True)
class Column:
    key: object  # a figure's name, or a tuple of names shown in one cell as "a / b / c"
    header: str
    digits: Optional[int] = None

    def of(self, figures: dict) -> str:
        keys = self.key if isinstance(self.key, tuple) else (self.key,)
        return " / ".join(cell(figures.get(k), self.digits) for k in keys)


@dataclasses.dataclass(frozen=True)
class View:
    """One table: a benchmark's lines that have the figure `needs`, in `columns`; benchmark None: every benchmark
    that no other view shows, with all its figures in one cell."""

    name: str
    benchmark: Optional[str]
    columns: Tuple[Column, ...] = ()
    needs: Optional[str] = None
    doc: str = DOCS[0]  # the file under docs/ that holds its table


VIEWS = (
    View("default_run", "keras_comparison", (
        Column("precision", "precision"), Column("time_to_992", "99.2% first evaluated, s (median)", 1),
        Column("steps_at_992", "at step"), Column("final_accuracy", "final accuracy (worst)", 3),
        Column("first_step_after_launch", "launch to first step, s", 1),
        Column("exit_after_last_step", "last step to exit, s (worst)", 1),
        Column("defaults_2w_images_per_sec", "images/s", 0)), needs="final_accuracy"),
    View("peers", "keras_comparison", (
        Column("fp32_2w_ratio", "2 workers / Keras", 2), Column("ddp_2w_ratio", "2 workers / DDP", 2),
        Column("two_over_one", "2 workers / 1", 2), Column("startup_ratio", "start-up / Keras", 2),
        Column("keras_minus_trainer_points", "Keras minus trainer, points", 2),
        Column("trainer_2w_images_per_sec", "images/s, 2 workers", 0),
        Column("bf16_2w_ratio", "defaults / Keras", 2)), needs="fp32_2w_ratio"),
    View("fault_campaign", "fault_campaign", (
        Column("faults", "faults"), Column("finished", "finished"),
        Column(("min_accuracy", "max_accuracy"), "accuracy, worst / best", 4),
        Column("baseline_seconds", "fault-free run, s"),
        Column(("lost_sigkill_chief", "lost_sigkill_worker"), "SIGKILL chief / worker, s lost"),
        Column(("lost_sigstop_chief", "lost_sigstop_worker"), "SIGSTOP chief / worker, s lost"),
        Column(("lost_sigkill_evaluator", "lost_sigstop_evaluator"), "SIGKILL / SIGSTOP evaluator, s lost"),
        Column("lost_sigkill_launcher", "SIGKILL launch, s lost"), Column("stall_timeout", "stall timeout, s"),
        Column("leftover", "left running")), needs="finished", doc="fault_tolerance.md"),
    View("degraded_network", "degraded_network", tuple(
        Column(tuple(f"{setup}_{link}" for link in ("0ms_0pct", "10ms_0.1pct", "50ms_1pct")), header, 3)
        for setup, header in (("mwms", "MWMS float32"), ("mwms_bf16", "MWMS bf16 gradients"),
                              ("async_ps", "async ps, all steps"), ("async_ps_chief", "async ps, the chief's own")))
        + (Column("failed_exits", "exits not 0"),), needs="mwms_0ms_0pct", doc="fault_tolerance.md"),
    View("by_kind", "keras_comparison"),
    View("other", None),
)
BY_KIND_HEADERS = ("CPU", "99.2% first evaluated, s (median)", "training images by then (median)",
                   "final accuracy (worst)", "default run: measured or carried", "2 workers / Keras",
                   "2 workers / DDP", "start-up / Keras", "like-for-like: measured")
# The default run's global batch before keras_comparison recorded images_at_992: 2 workers x 256.
EARLIER_GLOBAL_BATCH = 512


def default_max_steps() -> Optional[int]:
    """config/local.yaml's training.max_steps: a default-run line of another length is carried, not today's."""
    from estimator_mnist.config import load_config  # pylint: disable=import-outside-toplevel

    return load_config(str(REPO / "config" / "local.yaml")).training.max_steps


def _images_at_992(figures: dict):
    if figures.get("images_at_992") is not None:
        return figures["images_at_992"]
    steps = sorted(s for s in figures.get("steps_at_992") or [] if s is not None)
    return steps[len(steps) // 2] * EARLIER_GLOBAL_BATCH if steps else None


def _thousands(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _measured(record: dict) -> str:
    return f"{record['date'].replace('T', ' ')[:10]}, {record.get('commit') or '-'}"


def _default_run_when(record: dict, today_steps: Optional[int]) -> str:
    steps = record["figures"].get("default_max_steps")
    if steps is not None and steps == today_steps:
        return f"measured {_measured(record)}"
    return f"carried: {_measured(record)}, " + (f"the {steps}-step defaults" if steps else "earlier defaults")


def render_by_kind(records: Sequence[dict], today_steps: Optional[int]) -> str:
    """One line per CPU kind (vendor, family, model): its newest default run and like-for-like ratios measured on
    that kind itself (an --isa emulation counts for no kind), each saying when, and whether the default run was
    today's defaults or is carried from earlier ones."""
    own = [r for r in records if r["benchmark"] == "keras_comparison" and "--isa" not in r.get("variant", "")]
    lines = ["| " + " | ".join(BY_KIND_HEADERS) + " |", "|" + " --- |" * len(BY_KIND_HEADERS)]
    labels = sorted({cpu_label(r["cpu"]): r["cpu"] for r in own}.items(), key=lambda item: _cpu_order(item[1]))
    for label, _ in labels:
        mine = [r for r in own if cpu_label(r["cpu"]) == label]
        run = max((r for r in mine if r["figures"].get("time_to_992") is not None), key=lambda r: r["date"],
                  default=None)
        peers = max((r for r in mine if r["figures"].get("ddp_2w_ratio") is not None
                     or r["figures"].get("fp32_2w_ratio") is not None), key=lambda r: r["date"], default=None)
        figures, ratios = (run or {}).get("figures", {}), (peers or {}).get("figures", {})
        lines.append("| " + " | ".join([
            label, cell(figures.get("time_to_992"), 1), _thousands(_images_at_992(figures)),
            cell(figures.get("final_accuracy"), 3), _default_run_when(run, today_steps) if run else "not measured",
            cell(ratios.get("fp32_2w_ratio"), 2), cell(ratios.get("ddp_2w_ratio"), 2),
            cell(ratios.get("startup_ratio"), 2), _measured(peers) if peers else "not measured"]) + " |")
    return "\n".join(lines) + "\n"


def cpu_label(cpu: dict) -> str:
    model = f" model {cpu['model']}" if cpu.get("model") is not None else ""
    numbers = f" (family {cpu['family']}{model})" if cpu.get("family") is not None else ""
    name = cpu.get("model_name") or cpu.get("vendor") or "unknown"
    return f"{name}{numbers}, {cpu.get('kind')}, {cpu.get('cpus')} CPUs"


def _cpu_order(cpu: dict) -> tuple:
    kind = cpu.get("kind")
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), cpu_label(cpu))


def newest(records: Iterable[dict]) -> List[dict]:
    """The newest line of each benchmark, CPU and variant (the later line when two have the same date), sorted."""
    kept = {}
    for record in records:
        key = (record["benchmark"], cpu_label(record["cpu"]), record.get("variant", ""))
        if key not in kept or record["date"] >= kept[key]["date"]:
            kept[key] = record
    return sorted(kept.values(), key=lambda r: (r["benchmark"], _cpu_order(r["cpu"]), r.get("variant", "")))


def cell(value, digits: Optional[int] = None) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(cell(v, digits) for v in value)
    if isinstance(value, float) and digits is not None:
        return f"{value:.{digits}f}"
    return str(value)


def _note(record: dict) -> str:
    load = record.get("load_average")
    parts = ([f"load {load:g}"] if load is not None else []) + ([record["note"]] if record.get("note") else [])
    return "; ".join(parts).replace("|", "/")


def _shown(view: View, record: dict) -> bool:
    if view.benchmark is None:
        return record["benchmark"] not in {v.benchmark for v in VIEWS if v.benchmark}
    return record["benchmark"] == view.benchmark and record["figures"].get(view.needs) is not None


def _scalars(figures: dict) -> str:
    """Every figure but lists and the CPU kind (its own column), as key=value."""
    return " ".join(f"{k}={cell(v)}" for k, v in figures.items() if not isinstance(v, (list, dict)) and k != "cpu")


def render(view: View, records: Sequence[dict]) -> str:
    if view.name == "by_kind":
        return render_by_kind(records, default_max_steps())
    rows = newest(r for r in records if _shown(view, r))
    first = ["benchmark"] if view.benchmark is None else []
    figures = [c.header for c in view.columns] or ["figures"]
    lines = ["| " + " | ".join(first + ["CPU", "date (UTC), commit", "variant"] + figures + ["note"]) + " |",
             "|" + " --- |" * (len(first) + 4 + len(figures))]
    for r in rows:
        values = ([c.of(r["figures"]) for c in view.columns] if view.columns
                  else [_scalars(r["figures"])])
        date = r["date"].replace("T", " ")[:16]
        lines.append("| " + " | ".join(([r["benchmark"]] if first else []) + [
            cpu_label(r["cpu"]), f"{date}, {r.get('commit') or '-'}", f"`{r['variant']}`" if r.get("variant") else "",
            *values, _note(r)]) + " |")
    return "\n".join(lines) + "\n"


def rewrite(doc: str, records: Sequence[dict], doc_name: str = DOCS[0]) -> str:
    """`doc` (docs/`doc_name`) with each table block made again from `records`; every view of that doc must have
    its block."""
    views = {view.name: view for view in VIEWS if view.doc == doc_name}
    found = [match.group(2) for match in BLOCK.finditer(doc)]
    for name in found:
        if name not in views:
            raise ValueError(UNKNOWN_TABLE.format(name=name, names=", ".join(views)))
    missing = [name for name in views if name not in found]
    if missing:
        raise ValueError(NO_BLOCK.format(name=missing[0]))
    return BLOCK.sub(lambda m: m.group(1) + render(views[m.group(2)], records) + m.group(4), doc)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS_FILE, help="the JSON lines (default: %(default)s)")
    parser.add_argument("--docs", type=Path, default=REPO / "docs",
                        help=f"the folder of {', '.join(DOCS)}, which --write rewrites (default: %(default)s)")
    parser.add_argument("--write", action="store_true", help="rewrite the docs' tables instead of printing them")
    args = parser.parse_args(argv)
    path = args.results
    try:
        records = read_results(path)
        if not args.write:
            print("\n".join(f"{view.name}:\n{render(view, records)}" for view in VIEWS))
            return 0
        for name in DOCS:
            path = args.docs / name
            path.write_text(rewrite(path.read_text(encoding="utf-8"), records, name), encoding="utf-8")
    except (OSError, ValueError) as error:
        print(f"results_table.py: error: {path}: {error}", file=sys.stderr)
        return USAGE_EXIT_CODE
    print(f"rewrote the tables of {', '.join(DOCS)} in {args.docs} from {len(records)} lines of {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
