"""Where one like-for-like training step's time goes: computing, or waiting on the gradients' all-reduce.

Runs keras_comparison.py's like-for-like trainer (2 workers of --threads
intra-op and --inter-op threads, float32, batch 64, Adam 0.001) for --steps
steps with `training.trace_step`, so that every trainer writes the full
TensorFlow trace of its local step --trace-step (<run_dir>/traces/, Chrome's
trace format), and prints for each trainer:

- the step, from its first op's start to its last op's end;
- computing: the time some op other than a collective or a transfer ran
  (forward and backward, then the optimizer's updates), and waiting: the rest;
- when the backward pass ended (its last `gradients/` op) and when the
  gradients' transfers (RecvBuf of 1 KiB or more) began and ended, relative
  to the step's start: a transfer that begins before the backward pass ends overlaps
  it, as PyTorch DDP's bucketed all-reduce does.

One traced step is one sample: run it twice before reading a difference of a
few milliseconds. The trace itself costs that step a few milliseconds.
--isa sets ONEDNN_MAX_CPU_ISA (it picks kernels; no cap stands in for another
CPU kind: run it on that kind).

  .venv/bin/python benchmarks/step_timeline.py [--steps 400] [--trace-step 300] [--inter-op 1] [--isa AVX2]

The last line is machine-readable (means over the trainers):

  RESULT step_ms=... compute_ms=... wait_ms=... update_ms=... backward_end_ms=... first_transfer_ms=... transfers_end_ms=...
"""

from __future__ import annotations

import json
import os
import re
import statistics
import tempfile
from pathlib import Path
from typing import Dict, Iterable, Tuple

from estimator_mnist.config import TaskId, load_config
from estimator_mnist.tf_task.step_trace import trace_path

from common import DEFAULT_CONFIG, benchmark_parser, write_json
from comparison_runs import run_trainer
from results import figures_of, record_run

# Ops that run asynchronously beside the compute: the collectives wait for the peers, and each RecvBuf is
# one chunk of a peer's tensor arriving. TensorFlow 2.15 labels a transfer "[104256B] ..." or "[3.1MB] ..."
# (MiB from 0.1 MiB on: WorkerCacheLogger::RecordDataTransfer).
ASYNC_OP_PREFIXES = ("Collective",)
TRANSFER = "RecvBuf"
UPDATE_MARKERS = ("ResourceApply", "Adam/", "update_")
_TRANSFER_BYTES = re.compile(r"^\[(\d+(?:\.\d+)?)(B|MB)\]")
# The loss and the step counter are all-reduced too, 4 bytes each, from the forward pass on: not gradients.
GRADIENT_TRANSFER_MIN_BYTES = 1024


def transfer_bytes(label: str) -> float:
    match = _TRANSFER_BYTES.match(label)
    if not match:
        return 0.0
    return float(match.group(1)) * (1 if match.group(2) == "B" else 1 << 20)


def _interval(event: dict) -> Tuple[float, float]:
    return event["ts"], event["ts"] + event["dur"]


def _arg(event: dict, key: str) -> str:
    return event.get("args", {}).get(key, "")


def _intervals_union(intervals: Iterable[Tuple[float, float]]) -> float:
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def summarise_trace(trace: dict) -> Dict[str, float]:
    """Milliseconds, from the step's first op, of one trainer's traced step (TensorFlow's Chrome trace)."""
    ops = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    if not ops:
        raise SystemExit("the trace holds no op: was the traced step run?")
    start = min(e["ts"] for e in ops)
    end = max(_interval(e)[1] for e in ops)
    compute = [e for e in ops if not (e["name"].startswith(ASYNC_OP_PREFIXES) or _arg(e, "name") == TRANSFER)]
    updates = [e for e in compute if any(m in e["name"] or m in _arg(e, "name") for m in UPDATE_MARKERS)]
    backward = [e for e in compute if _arg(e, "name").startswith("gradients/")]
    transfers = [e for e in ops if _arg(e, "name") == TRANSFER
                 and transfer_bytes(_arg(e, "label")) >= GRADIENT_TRANSFER_MIN_BYTES]
    ms = lambda t: (t - start) / 1000.0  # noqa: E731
    busy = _intervals_union(map(_interval, compute)) / 1000.0
    return {
        "step_ms": ms(end), "compute_ms": busy, "wait_ms": ms(end) - busy,
        "update_ms": _intervals_union(map(_interval, updates)) / 1000.0,
        "backward_end_ms": ms(max(_interval(e)[1] for e in backward)) if backward else None,
        "first_transfer_ms": ms(min(e["ts"] for e in transfers)) if transfers else None,
        "transfers_end_ms": ms(max(_interval(e)[1] for e in transfers)) if transfers else None,
    }


def _line(task: str, f: Dict[str, float]) -> str:
    def at(key):
        return "-" if f[key] is None else f"{f[key]:.1f}"
    return (f"{task}: step {f['step_ms']:.1f} ms; computing {f['compute_ms']:.1f} (updates {f['update_ms']:.1f}), "
            f"waiting {f['wait_ms']:.1f}; backward pass ends at {at('backward_end_ms')}, transfers from "
            f"{at('first_transfer_ms')} to {at('transfers_end_ms')}")


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--trace-step", type=int, default=300, help="the local step every trainer traces")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per trainer")
    parser.add_argument("--inter-op", type=int, default=1, help="inter-op threads per trainer")
    parser.add_argument("--isa", help="ONEDNN_MAX_CPU_ISA for the trainers, e.g. AVX2 (default: this CPU's own)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed for the run")
    args = parser.parse_args(argv)
    if not 1 <= args.trace_step <= args.steps:
        parser.error(f"--trace-step {args.trace_step}: give a step from 1 to --steps ({args.steps})")
    if args.isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = args.isa  # the launcher passes its environment on to every task
    data_dir = load_config(str(DEFAULT_CONFIG)).data_dir
    with tempfile.TemporaryDirectory(prefix="step_timeline_") as workdir:
        work = Path(workdir)
        run_trainer(work, data_dir, 2, steps=args.steps, batch=64, precision="float32",
                    threads=(args.threads, args.inter_op), learning_rate=0.001, warmup=max(1, args.steps // 4),
                    timeout=args.timeout, extra=[f"training.trace_step={args.trace_step}"])
        (run_dir,) = work.glob("trainer_2w_*")
        paths = {task: Path(trace_path(str(run_dir), task, args.trace_step))
                 for task in (TaskId("chief", 0), TaskId("worker", 0))}  # run_trainer's two trainers
        missing = [str(path) for path in paths.values() if not path.is_file()]
        if missing:
            raise SystemExit(f"no trace where each trainer writes it: {', '.join(missing)}")
        per_task = {str(task): summarise_trace(json.loads(path.read_text())) for task, path in paths.items()}
    for task, figures in per_task.items():
        print(_line(task, figures))
    keys = list(next(iter(per_task.values())))
    means = {k: statistics.mean(f[k] for f in per_task.values()) if all(f[k] is not None for f in per_task.values())
             else None for k in keys}
    if args.json:
        write_json(args.json, {"per_task": per_task, "means": means, "trace_step": args.trace_step,
                               "threads": args.threads, "inter_op": args.inter_op, "isa": args.isa or "native"})
    result = "RESULT " + " ".join(f"{k}={'none' if v is None else f'{v:.1f}'}" for k, v in means.items())
    record_run(args, "step_timeline", figures_of(result))
    print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
