"""Which oneDNN kernels the like-for-like runs compute with, and how long each takes per step.

Runs keras_comparison.py's like-for-like trainer (2 workers of 1 thread,
float32, batch 64, Adam 0.001) and, when benchmarks/setup_pytorch.sh made its
venv, the PyTorch DDP reference, for --steps steps each with ONEDNN_VERBOSE=1,
and prints, per system, the oneDNN primitives one worker ran: kind,
implementation (jit:avx2, brgconv:avx512_core, ...), direction and shape, in
milliseconds per step (the mean over every step, the first ones included).
Both TensorFlow 2.15 and PyTorch compute their convolutions with oneDNN, so
the table shows whether the two pick different kernels on this CPU, and what
each costs. Images/s from such short runs are not the benchmark's figures.

--isa AVX2 sets ONEDNN_MAX_CPU_ISA: oneDNN then picks the kernels a CPU
without AVX-512 gets. Their speed stays this CPU's: no cap stands in for
another CPU kind (docs/performance.md).

  .venv/bin/python benchmarks/onednn_kernels.py [--steps 80] [--isa AVX2] [--ddp auto|on|off]

The last line is machine-readable:

  RESULT trainer_ms_per_step=... ddp_ms_per_step=...|none isa=...|native
"""

from __future__ import annotations

import collections
import os
import tempfile
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

from estimator_mnist.config import load_config
from estimator_mnist.model_files.progress import STEP_TIMES_EVERY

from common import DEFAULT_CONFIG, benchmark_parser, write_json
from comparison_runs import run_ddp, run_trainer, torch_available
from results import figures_of, record_run

Kernel = Tuple[str, str, str, str]  # primitive, implementation, direction, shape


def kernel_times(lines: Iterable[str]) -> Dict[Kernel, float]:
    """Milliseconds per kernel, summed over oneDNN's `exec` lines.

    TensorFlow's oneDNN writes `onednn_verbose,exec,cpu,<primitive>,<impl>,<direction>,...,<shape>,<ms>`;
    PyTorch's newer one puts `v1,primitive,` before `exec`. Both end with the shape and the time.
    """
    totals: Dict[Kernel, float] = collections.defaultdict(float)
    for line in lines:
        if not line.startswith("onednn_verbose,"):
            continue
        fields = line.rstrip("\n").split(",")
        if "exec" not in fields:
            continue
        at = fields.index("exec")
        try:
            milliseconds = float(fields[-1])
        except ValueError:
            continue
        totals[(fields[at + 2], fields[at + 3], fields[at + 4], fields[-2])] += milliseconds
    return dict(totals)


def _log_of(work: Path, prefix: str, pattern: str) -> Path:
    """The one log `pattern` matches in the single run directory starting with `prefix` under `work`."""
    (run_dir,) = [p for p in work.iterdir() if p.name.startswith(prefix)]
    (log,) = sorted(run_dir.glob(pattern))
    return log


def _table(name: str, times: Dict[Kernel, float], steps: int) -> float:
    print(f"\n{name}: oneDNN kernels, ms per step (of {steps} steps)")
    for (primitive, impl, direction, shape), total in sorted(times.items(), key=lambda kv: -kv[1]):
        if total / steps >= 0.05:
            print(f"{total / steps:8.2f}  {primitive:<14} {impl:<28} {direction:<17} {shape}")
    per_step = sum(times.values()) / steps
    print(f"{per_step:8.2f}  in all")
    return per_step


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, not_measured=("ddp",))
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--isa", help="ONEDNN_MAX_CPU_ISA for both systems, e.g. AVX2 (default: this CPU's own)")
    parser.add_argument("--ddp", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed per run")
    args = parser.parse_args(argv)
    if args.steps < 2 * STEP_TIMES_EVERY:
        parser.error(f"--steps {args.steps}: the runs need at least {2 * STEP_TIMES_EVERY} (their images/s window)")
    if args.ddp == "on" and not torch_available():
        parser.error("--ddp on: no PyTorch venv; run benchmarks/setup_pytorch.sh first")
    ddp = args.ddp == "on" or (args.ddp == "auto" and torch_available())
    # The children inherit these: the launcher passes its environment on to every task.
    os.environ["ONEDNN_VERBOSE"] = "1"
    if args.isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = args.isa
    data_dir = load_config(str(DEFAULT_CONFIG)).data_dir
    same = dict(steps=args.steps, batch=64, precision="float32", threads=(1, 1), learning_rate=0.001,
                warmup=max(1, args.steps // 4), timeout=args.timeout)
    ddp_ms: Optional[float] = None
    with tempfile.TemporaryDirectory(prefix="onednn_kernels_") as workdir:
        work = Path(workdir)
        run_trainer(work, data_dir, 2, **same)
        trainer = kernel_times(_log_of(work, "trainer_2w_", "logs/*/worker-0.log").read_text(
            errors="replace").splitlines())
        figures = {"isa": args.isa or "native", "steps": args.steps,
                   "trainer_ms_per_step": _table("this trainer (worker 0)", trainer, args.steps)}
        if ddp:
            run_ddp(work, data_dir, 2, **same)
            times = kernel_times(_log_of(work, "ddp_2w_", "worker-1.log").read_text(errors="replace").splitlines())
            ddp_ms = _table("PyTorch DDP (rank 1)", times, args.steps)
    figures["ddp_ms_per_step"] = ddp_ms
    if args.json:
        write_json(args.json, figures)
    result = (f"RESULT trainer_ms_per_step={figures['trainer_ms_per_step']:.2f} "
              f"ddp_ms_per_step={'none' if ddp_ms is None else f'{ddp_ms:.2f}'} isa={figures['isa']}")
    record_run(args, "onednn_kernels", figures_of(result))
    print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
