"""Seconds per step over a slow, lossy link between two simulated hosts: when does the network dominate?

Each run puts the chief on host a and the worker (and the ps) on host b, two network namespaces joined by
the netem stand-in of the tests (tests/e2e/netem_link.py: this kernel has no sch_netem), which delays
every frame by D ms each way and drops it with probability P. Tasks are started by hand with
`train --task`, as on real machines. For each link it runs MultiWorkerMirrored with float32 gradients,
with `strategy.gradient_compression: bf16`, and the asynchronous parameter-server strategy, and prints
the seconds per global step after the first (from the trainers' progress records), the chief's own
seconds per step (under the asynchronous strategy the worker beside the ps makes most steps), each task's
exit code and the frames the link dropped; then the slowdown against the clean link. Needs root.

  .venv/bin/python benchmarks/degraded_network.py                      # links 0/0, 10 ms/0.1 %, 50 ms/1 %
  .venv/bin/python benchmarks/degraded_network.py --links 50:0.01 --steps 40

The last line is machine-readable, and its figures are appended to docs/benchmark_results.jsonl
(benchmarks/results.py), from which docs/fault_tolerance.md's table is made:

  RESULT mwms_0ms_0pct=... mwms_bf16_10ms_0.1pct=... async_ps_chief_50ms_1pct=... ... failed_exits=...

It is a measurement, not a test: it asserts nothing.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import REPO, benchmark_parser, write_json
from results import figures_of, record_run

sys.path.insert(0, str(REPO))  # the simulated hosts live with the tests
from tests.e2e.simulated_hosts import Netem, SimulatedHosts, can_make_namespaces  # noqa: E402

from estimator_mnist.config import default_data_dir  # noqa: E402
from estimator_mnist.model_files.progress import read_progress  # noqa: E402

TRAINING = """
training: {{batch_size_per_replica: {batch}, max_steps: {steps}, save_checkpoints_steps: {steps},
           session_creation_timeout_secs: 120}}
model_dir: {root}/model
run_dir: {root}/run
data_dir: {data_dir}
"""
SETUPS = {
    "mwms": ('cluster: {chief: ["192.0.2.1:2222"], worker: ["192.0.2.2:2222"]}\n'
             "strategy: {name: multi_worker_mirrored, gradient_compression: none}\n"),
    "mwms_bf16": ('cluster: {chief: ["192.0.2.1:2222"], worker: ["192.0.2.2:2222"]}\n'
                  "strategy: {name: multi_worker_mirrored, gradient_compression: bf16}\n"),
    "async_ps": ('cluster: {chief: ["192.0.2.1:2222"], worker: ["192.0.2.2:2222"], ps: ["192.0.2.2:2223"]}\n'
                 "strategy: parameter_server\n"),
}
HOST_OF = {"chief:0": "a", "worker:0": "b", "ps:0": "b"}


def seconds_per_step(records: dict):
    """Seconds per global step, from the chief's first step to the trainers' last (their progress records):
    start-up and session creation left out; for the asynchronous run, both trainers' steps together."""
    chief = records.get("chief:0") or {}
    trainers = [r for task, r in records.items() if task.split(":")[0] in ("chief", "worker")]
    ends = [r["time"] for r in trainers if r.get("time")]
    last_step = max((r.get("global_step") or 0 for r in trainers), default=0)
    if not chief.get("first_step_time") or not ends or last_step < 2:
        return None
    return (max(ends) - chief["first_step_time"]) / (last_step - 1)


def chief_pace(records: dict):
    """The chief's own seconds per step (host a, across the link from the worker and the ps)."""
    chief = records.get("chief:0") or {}
    if not chief.get("first_step_time") or (chief.get("local_step") or 0) < 2:
        return None
    return (chief["time"] - chief["first_step_time"]) / (chief["local_step"] - 1)


def one_run(workdir: Path, setup: str, link: Netem, steps: int, batch: int, data_dir: str, timeout: float) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"{setup}_", dir=workdir))
    path = root / "cluster.yaml"
    path.write_text(SETUPS[setup] + TRAINING.format(steps=steps, batch=batch, root=root, data_dir=data_dir))
    hosts = SimulatedHosts(uuid.uuid4().hex[:6], netem=link, stats=root / "link.json")
    try:
        tasks = [t for t in HOST_OF if t != "ps:0" or setup == "async_ps"]
        started = time.monotonic()
        procs = {t: hosts.start(HOST_OF[t], ["train", "--cluster", str(path), "--task", t],
                                root / f"{t.replace(':', '-')}.log") for t in tasks}
        hosts.wait_all(procs, timeout=timeout)
        seconds = time.monotonic() - started
        codes = {t: p.poll() for t, p in procs.items()}
    finally:
        hosts.close()
    records = read_progress(str(root / "run"))
    link_counts = json.loads((root / "link.json").read_text()) if (root / "link.json").exists() else {}
    return {"setup": setup, "delay_ms": link.delay_ms, "loss": link.loss, "steps": steps, "batch": batch,
            "exits": codes,
            "seconds": round(seconds, 1), "seconds_per_step": seconds_per_step(records),
            "chief_seconds_per_step": chief_pace(records), "chief_steps": (records.get("chief:0") or {}).get("local_step"),
            "frames_dropped": sum(c.get("lost", 0) for c in link_counts.values()),
            "frames": sum(c.get("frames", 0) for c in link_counts.values()), "run": str(root)}


def parse_links(text: str):
    links = []
    for item in text.split(","):
        delay, loss = item.split(":")
        links.append(Netem(delay_ms=float(delay), loss=float(loss), seed=len(links)))
    return links


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--links", default="0:0,10:0.001,50:0.01", help="DELAY_MS:LOSS,... (loss as a fraction)")
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"some of {', '.join(SETUPS)}")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256, help="batch_size_per_replica (256: config/local.yaml's)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a run's `finally` then stops its tasks and hosts
    if not can_make_namespaces():
        print("degraded_network.py: error: needs root and iproute2 ('ip') for the simulated hosts", file=sys.stderr)
        return 2
    from estimator_mnist.mnist_data.prepare import prepare_data  # pylint: disable=import-outside-toplevel

    data_dir = default_data_dir()
    prepare_data(data_dir, log=lambda message: None)
    runs = []
    with tempfile.TemporaryDirectory(prefix="degraded_network_") as workdir:
        for link in parse_links(args.links):
            for setup in args.setups.split(","):
                run = one_run(Path(workdir), setup, link, args.steps, args.batch, data_dir, args.timeout)
                runs.append(run)
                per_step, chief = (f"{run[key]:.3f}" if run[key] else "none"
                                   for key in ("seconds_per_step", "chief_seconds_per_step"))
                print(f"delay={link.delay_ms:g}ms loss={link.loss * 100:g}% {setup:9s} s/step={per_step} "
                      f"chief_s/step={chief} (its {run['chief_steps']} steps) "
                      f"run={run['seconds']:.0f}s exits={run['exits']} dropped={run['frames_dropped']}/"
                      f"{run['frames'] + run['frames_dropped']} frames", flush=True)
    clean = {r["setup"]: r["seconds_per_step"] for r in runs if r["delay_ms"] == 0 and r["loss"] == 0}
    for run in runs:
        base, value = clean.get(run["setup"]), run["seconds_per_step"]
        if base and value and (run["delay_ms"] or run["loss"]):
            print(f"SLOWDOWN {run['setup']} delay={run['delay_ms']:g}ms loss={run['loss'] * 100:g}%: "
                  f"{value / base:.1f}x the clean link")
    if args.json:
        write_json(args.json, runs)
    result = "RESULT " + " ".join(f"{k}={v}" for k, v in step_figures(runs).items())
    record_run(args, "degraded_network", figures_of(result))
    print(result)
    return 0


def link_name(delay_ms: float, loss: float) -> str:
    return f"{delay_ms:g}ms_{loss * 100:g}pct"


def step_figures(runs: list) -> dict:
    """Seconds per step by setup and link, `<setup>_<delay>ms_<loss>pct` (the chief's own under async ps:
    `async_ps_chief_...`), and how many tasks did not exit 0; 'none' for a run without a rate."""
    figures = {}
    for run in runs:
        link = link_name(run["delay_ms"], run["loss"])
        figures[f"{run['setup']}_{link}"] = round(run["seconds_per_step"], 3) if run["seconds_per_step"] else None
        if run["setup"] == "async_ps":
            chief = run["chief_seconds_per_step"]
            figures[f"async_ps_chief_{link}"] = round(chief, 3) if chief else None
    figures["failed_exits"] = sum(code != 0 for run in runs for code in run["exits"].values())
    return {k: ("none" if v is None else v) for k, v in figures.items()}


if __name__ == "__main__":
    sys.exit(main())
