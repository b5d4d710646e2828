"""Whether this machine's CPUs are cores of their own or hardware threads that share one.

Two workers on two CPUs can only be faster than one worker if the CPUs add
arithmetic. A cloud VM's "2 vCPUs" are often the two hardware threads
(SMT) of one physical core, and the guest cannot tell: lscpu inside it may
say "Thread(s) per core: 1". This times a single-threaded float32 matrix
product, small enough to stay in a core's own L2 cache, on each usable CPU
alone and then on all of them at once:

  .venv/bin/python benchmarks/core_sharing.py
  RESULT together_over_alone=1.09 cpus=2    # about 1.0-1.3: they share one core; about 2.0: two cores

It runs for about 6 s per CPU plus 6 s, needs only numpy, and must have
the machine to itself.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

# One BLAS thread per process, set before numpy starts its thread pool: each
# measurement must be one thread on one CPU.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402  (after the thread settings above)

from estimator_mnist.plan.cpu import usable_cpus  # noqa: E402

from common import benchmark_parser  # noqa: E402
from cpu_facts import cpu_kind, cpu_model  # noqa: E402
from results import figures_of, record_run  # noqa: E402

SIZE = 192  # three 192x192 float32 matrices take 432 KB: within any recent core's L2


def gflops(cpu: int, seconds: float, start: float) -> float:
    """GFLOP/s of one thread on `cpu`, timed from the shared `start` for `seconds`."""
    os.sched_setaffinity(0, {cpu})
    a = np.random.default_rng(cpu).random((SIZE, SIZE), dtype=np.float32)
    while time.time() < start:
        time.sleep(0.001)
    products, began = 0, time.time()
    while time.time() - began < seconds:
        a @ a
        products += 1
    return products * 2 * SIZE ** 3 / (time.time() - began) / 1e9


def measure(cpus, seconds: float):
    with multiprocessing.get_context("fork").Pool(len(cpus)) as pool:
        alone = [pool.apply(gflops, (cpu, seconds, time.time())) for cpu in cpus]
        start = time.time() + 0.5
        together = pool.starmap(gflops, [(cpu, seconds, start) for cpu in cpus])
    return alone, together


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, json_help=None)
    parser.add_argument("--seconds", type=float, default=6.0, help="each measurement's length")
    args = parser.parse_args(argv)
    cpus = sorted(usable_cpus())
    if len(cpus) < 2:
        print(f"only CPU {cpus} is usable here: nothing to compare")
        return 0
    alone, together = measure(cpus, args.seconds)
    print(f"{cpu_model()} ({cpu_kind()}), CPUs {cpus}")
    for cpu, one, both in zip(cpus, alone, together):
        print(f"CPU {cpu}: {one:.1f} GFLOP/s alone, {both:.1f} with every CPU busy")
    ratio = sum(together) / max(alone)
    result = f"RESULT together_over_alone={ratio:.2f} cpus={len(cpus)}"
    record_run(args, "core_sharing", figures_of(result) | {"gflops_alone": [round(g, 1) for g in alone]})
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
