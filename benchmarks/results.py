"""The benchmark results file: one JSON line per benchmark run, with its commit, CPU, date and figures.

Every benchmark that prints a RESULT line appends such a line, by default to
docs/benchmark_results.jsonl (committed with the code it measured), or to
--results FILE or $ESTIMATOR_MNIST_BENCHMARK_RESULTS; --no-results appends
nothing. benchmarks/results_table.py turns the file into the tables of
docs/performance.md. A line (format 1):

  {"format": 1, "benchmark": "keras_comparison", "date": "2026-11-25T05:56:08Z", "commit": "ca9b1d2",
   "cpu": {"vendor": "AuthenticAMD", "family": 25, "model": 17, "model_name": "AMD EPYC", "kind": "avx512_bf16",
           "cpus": 2},
   "variant": "--repeats 0 --workers 2", "load_average": 2.3, "figures": {"time_to_992": 41.408, ...},
   "note": "..."}

`commit` ends in "-dirty" when tracked files outside docs/ differ from it;
`variant` lists the flags that differ from the benchmark's defaults and change
what it measures; `load_average` is the 1-minute load when the run ended (its
own processes count too: a load well above them means other work shared the
cores); `note` is --note's text.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Iterable, List, Optional

# cpu.py reads the first processor's /proc/cpuinfo fields; vendor, family and model are among them.
from estimator_mnist.plan.cpu import cpuinfo, usable_cpus

from cpu_facts import cpu_kind, cpu_model

FORMAT = 1
REPO = Path(__file__).resolve().parent.parent
RESULTS_FILE = REPO / "docs" / "benchmark_results.jsonl"
RESULTS_ENV = "ESTIMATOR_MNIST_BENCHMARK_RESULTS"
# Flags that say where the output goes, or how long to wait: they change no figure.
NOT_MEASURED = frozenset({"json", "results", "no_results", "note", "timeout", "csv", "help"})


class BenchmarkParser(argparse.ArgumentParser):
    """A benchmark's command line with --results, --no-results and --note. Its parsed arguments carry
    `variant`: the flags that differ from their defaults, less `not_measured` (set before a script changes them)."""

    def __init__(self, *args, not_measured: Iterable[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.not_measured = NOT_MEASURED | set(not_measured)
        self.add_argument("--results",  # text, not a Path: some benchmarks save their arguments as JSON
                          help=f"append this run's figures as one JSON line here (default: ${RESULTS_ENV}, "
                               f"else {RESULTS_FILE.relative_to(REPO)})")
        self.add_argument("--no-results", action="store_true", help="append nothing (a trial run)")
        self.add_argument("--note", default="", help="a remark kept with the figures, e.g. 'other work on the cores'")

    def parse_args(self, args=None, namespace=None):  # pylint: disable=signature-differs
        parsed = super().parse_args(args, namespace)
        parsed.variant = " ".join(
            f"--{key.replace('_', '-')}" + ("" if value is True else f" {value}")
            for key, value in vars(parsed).items()
            if key not in self.not_measured and value != self.get_default(key))
        return parsed


def cpu_identity(cpuinfo_path: str = "/proc/cpuinfo") -> dict:
    """Vendor, family and model numbers, model name, the CPU kind the figures are given per, and usable CPUs."""
    fields = cpuinfo(cpuinfo_path)

    def number(key: str) -> Optional[int]:
        try:
            return int(fields[key])
        except (KeyError, ValueError):
            return None

    return {"vendor": fields.get("vendor_id"), "family": number("cpu family"), "model": number("model"),
            "model_name": cpu_model(cpuinfo_path), "kind": cpu_kind(cpuinfo_path), "cpus": len(usable_cpus())}


def _git(*args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit() -> Optional[str]:
    """HEAD's short hash, "-dirty" when tracked files outside docs/ differ from it; None outside a checkout.
    docs/ is left out: appending to the results file or regenerating the doc's tables changes no figure."""
    head = _git("rev-parse", "--short=7", "HEAD")
    if head is None:
        return None
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs")
    return head + ("-dirty" if changed else "")


def figures_of(result_line: str) -> dict:
    """The key=value fields of a RESULT line: ints and floats as numbers, none as null, the rest as text."""
    figures = {}
    for field in result_line.split()[1:]:
        key, equals, text = field.partition("=")
        if equals:
            figures[key] = _value(text)
    return figures


def _value(text: str):
    if text.lower() == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def make_record(benchmark: str, figures: dict, variant: str = "", note: str = "",
                cpuinfo_path: str = "/proc/cpuinfo", now: Optional[float] = None) -> dict:
    record = {"format": FORMAT, "benchmark": benchmark,
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "commit": commit(),
              "cpu": cpu_identity(cpuinfo_path), "variant": variant,
              "load_average": round(os.getloadavg()[0], 1), "figures": figures}
    return record | ({"note": note} if note else {})


def results_path(args) -> Optional[Path]:
    """Where this run's line goes: --results, else $ESTIMATOR_MNIST_BENCHMARK_RESULTS, else the committed file."""
    if args.no_results:
        return None
    return Path(args.results or os.environ.get(RESULTS_ENV) or RESULTS_FILE)


def append(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def record_run(args, benchmark: str, figures: dict) -> Optional[Path]:
    """Appends this run's line (unless --no-results) and says where; call it before the RESULT line, which stays
    the last line of the output."""
    path = results_path(args)
    if path is not None:
        append(path, make_record(benchmark, figures, args.variant, args.note))
        print(f"results: one line appended to {path}", flush=True)
    return path


REQUIRED = ("benchmark", "date", "cpu", "figures")
BAD_LINE = "line {number} is not a JSON object with {required}: fix or remove it"


def read_results(path: Path) -> List[dict]:
    """Every line of the file (none if it does not exist); ValueError naming the first line that is not a result."""
    records = []
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or any(key not in record for key in REQUIRED):
            raise ValueError(BAD_LINE.format(number=number, required=", ".join(REQUIRED)))
        records.append(record)
    return records
