"""`estimator-mnist serve` under load: requests/s and p50/p99 latency for 1 and 16 concurrent clients over REST
and over gRPC, each sending single-image `serving_default` requests (a MNIST test digit as a PNG: b64 in JSON,
or a DT_STRING TensorProto), from this machine; then SIGTERM under 16 clients (the drain). REST and gRPC take
turns in rounds (--rounds), so that other work on shared cores falls on both alike: the median round counts.

The reference is a loop in this process calling the loaded SavedModel's
`serving_default` (tf.saved_model.load) with the same PNGs, one image per
call; the TF1 session Serving itself uses is printed beside it. Then 1,000
malformed requests, and the server's resident memory after them against
after the warm-up; last, 8 REST and 8 gRPC clients sending without pause
get SIGTERM (serve's default drain: 5 s answered, then refused): no request
sent before it may fail. The goals are printed as PASS or FAIL; nothing is
asserted. --json appends one line of every figure; the last line, RESULT
reference_images_per_sec=... requests_per_sec_1=... p50_ms_1=... p99_ms_1=...
requests_per_sec_16=... grpc_requests_per_sec_16=... drain_exit_secs=...
rss_growth=... all_goals=PASS|FAIL, goes to the results file
(benchmarks/results.py) as well.

    python benchmarks/serve_throughput.py --model runs/local --json runs/bench/serve_throughput.jsonl
"""

from __future__ import annotations

import base64
import json
import platform
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import requests

from common import REPO, benchmark_parser
from cpu_facts import cpu_kind, cpu_model
from results import figures_of, record_run
from serve_load import drain_under_load, grpc_load, grpc_requests, interleaved, rest_load
from tests.ports import free_loopback_ports  # noqa: E402  (common put the repository on the path)

GOAL_THROUGHPUT = 0.7  # 16 clients' images/s over the reference loop's
GOAL_P99_MS = 50.0  # at 1 client
GOAL_RSS_GROWTH = 0.10  # after the malformed requests, over after the warm-up
GOAL_DRAIN_SECS = 5.0 + 20.0 + 5.0  # serve's documented bound with its default drain flags
MALFORMED = [b'{"instances": [', b'{"instances": [{"b64": "%%%"}]}', b'{"instances": [{"b64": "aGVsbG8="}]}',
             b'{"signature_name": "images", "instances": [[0.5]]}', b'[1, 2]', b'']


def test_pngs(count: int) -> list:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from estimator_mnist.config import default_data_dir  # pylint: disable=import-outside-toplevel
    from estimator_mnist.tf_task.data import load_split  # pylint: disable=import-outside-toplevel

    images, _ = next(iter(load_split("test", default_data_dir()).batch(count)))
    return [tf.io.encode_png(image).numpy() for image in images]


def reference(export_dir: str, pngs: list, calls: int) -> dict:
    """images/s of one process calling serving_default one image at a time: TF2's loaded SavedModel (the goal's
    reference), and the TF1 session Serving uses."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from estimator_mnist.tf_model.inference import Classifier  # pylint: disable=import-outside-toplevel

    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    tensors = [tf.constant([png]) for png in pngs]
    for tensor in tensors[:20]:
        serving(image_bytes=tensor)
    started = time.perf_counter()
    for index in range(calls):
        serving(image_bytes=tensors[index % len(tensors)])
    tf2 = calls / (time.perf_counter() - started)
    with Classifier(export_dir) as classifier:
        feeds = [np.array([png], dtype=object) for png in pngs]
        for feed in feeds[:20]:
            classifier.run("serving_default", {"image_bytes": feed})
        started = time.perf_counter()
        for index in range(calls):
            classifier.run("serving_default", {"image_bytes": feeds[index % len(feeds)]})
        tf1 = calls / (time.perf_counter() - started)
    return {"tf2_saved_model_images_per_sec": tf2, "tf1_session_images_per_sec": tf1}


def start_server(model: str, extra: list):
    port, grpc_port = free_loopback_ports(2)
    proc = subprocess.Popen([sys.executable, "-m", "estimator_mnist", "serve", "--model", model, "--port", str(port),
                             "--grpc-port", str(grpc_port), *extra], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if "the page: " in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its pipe drained
            return proc, f"http://127.0.0.1:{port}/v1/models/mnist:predict", grpc_port
    raise SystemExit(f"serve exited with {proc.wait()} before it served")


def malformed(url: str, count: int) -> int:
    session = requests.Session()
    statuses = [session.post(url, data=MALFORMED[i % len(MALFORMED)], timeout=60).status_code for i in range(count)]
    return statuses.count(400)


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def measure(args, proc, url: str, grpc_port: int, bodies: list, predicts: list) -> dict:
    rest_load(url, bodies, 1, 50)  # warm-up
    grpc_load(grpc_port, predicts, 1, 50)
    rss_warm = psutil.Process(proc.pid).memory_info().rss
    levels, grpc_levels = [], []
    for clients in (1, 16):
        per_round = args.requests // args.rounds
        both = interleaved(args.rounds, {"rest": lambda: rest_load(url, bodies, clients, per_round),
                                         "grpc": lambda: grpc_load(grpc_port, predicts, clients, per_round)})
        levels.append(both["rest"])
        grpc_levels.append(both["grpc"])
    for api, level in [("REST", level) for level in levels] + [("gRPC", level) for level in grpc_levels]:
        print(f"{api:4s} {level['clients']:2d} clients: {level['requests_per_sec']:6.0f} requests/s  p50 "
              f"{level['p50_ms']:5.1f} ms  p99 {level['p99_ms']:5.1f} ms", flush=True)
    rejected = malformed(url, args.malformed)
    alive = proc.poll() is None and rest_load(url, bodies, 1, 10)["requests"] == 10
    rss_after = psutil.Process(proc.pid).memory_info().rss
    drain = drain_under_load(proc, url, grpc_port, bodies[0], predicts[0])
    print(f"SIGTERM under 16 clients: exit {drain['exit_code']} after {drain['exit_secs']:.1f} s; sent before it "
          f"{drain['sent_before']}, failed {drain['failed_before']}; after it {drain['answered_after']} answered "
          f"(the delay), {drain['refused_after']} refused, {drain['other_after']} otherwise", flush=True)
    return {"rss_warm": rss_warm, "rss_after": rss_after, "levels": levels, "grpc_levels": grpc_levels,
            "rejected": rejected, "alive": alive, "drain": drain}


def goals_of(args, ref: dict, m: dict) -> dict:
    growth = m["rss_after"] / m["rss_warm"] - 1
    ratio = m["levels"][1]["requests_per_sec"] / ref["tf2_saved_model_images_per_sec"]
    grpc_over_rest = m["grpc_levels"][1]["requests_per_sec"] / m["levels"][1]["requests_per_sec"]
    drain = m["drain"]
    return {"16_clients_over_reference": (ratio, ratio >= GOAL_THROUGHPUT),
            "p99_ms_1_client": (m["levels"][0]["p99_ms"], m["levels"][0]["p99_ms"] < GOAL_P99_MS),
            "rss_growth": (growth, growth <= GOAL_RSS_GROWTH and m["alive"] and m["rejected"] == args.malformed),
            "grpc_16_over_rest_16": (grpc_over_rest, grpc_over_rest >= 1.0),
            "drain": (drain["exit_secs"], drain["exit_code"] == 0 and drain["failed_before"] == 0
                      and drain["other_after"] == 0 and drain["exit_secs"] <= GOAL_DRAIN_SECS)}


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, json_help="append one JSON line of every figure to this file",
                              not_measured=("model",))
    parser.add_argument("--model", required=True, help="an export, a model_dir or a run directory")
    parser.add_argument("--requests", type=int, default=1000,
                        help="requests per client count and API, over all rounds (default 1000)")
    parser.add_argument("--digits", type=int, default=100, help="distinct test digits sent (default 100)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="REST and gRPC take turns this many times per client count; the median round counts")
    parser.add_argument("--malformed", type=int, default=1000)
    parser.add_argument("--serve-args", default="", help="more flags for serve, e.g. '--batch-timeout-ms 1'")
    args = parser.parse_args(argv)
    from estimator_mnist.tf_model.predict import find_export  # pylint: disable=import-outside-toplevel

    export_dir = find_export(args.model)
    pngs = test_pngs(args.digits)
    bodies = [json.dumps({"instances": [{"b64": base64.b64encode(png).decode()}]}).encode() for png in pngs]
    ref = reference(export_dir, pngs, args.requests)
    print(f"reference loop, one image per call: {ref['tf2_saved_model_images_per_sec']:.0f} images/s "
          f"(TF1 session, as Serving: {ref['tf1_session_images_per_sec']:.0f})", flush=True)
    proc, url, grpc_port = start_server(export_dir, args.serve_args.split())
    try:
        m = measure(args, proc, url, grpc_port, bodies, grpc_requests(pngs))
    finally:
        if proc.poll() is None:
            proc.send_signal(2)
            proc.wait(60)
    goals = goals_of(args, ref, m)
    for name, (value, passed) in goals.items():
        print(f"goal {name}: {value:.3f} {verdict(passed)}")
    levels, grpc_levels = m["levels"], m["grpc_levels"]
    result = (f"RESULT reference_images_per_sec={ref['tf2_saved_model_images_per_sec']:.0f} "
              + " ".join(f"{prefix}requests_per_sec_{level['clients']}={level['requests_per_sec']:.0f} "
                         f"{prefix}p50_ms_{level['clients']}={level['p50_ms']:.1f} "
                         f"{prefix}p99_ms_{level['clients']}={level['p99_ms']:.1f}"
                         for prefix, group in (("", levels), ("grpc_", grpc_levels)) for level in group)
              + f" drain_exit_secs={m['drain']['exit_secs']:.1f} drain_failed_before={m['drain']['failed_before']}"
              + f" malformed_400={m['rejected']} rss_growth={m['rss_after'] / m['rss_warm'] - 1:.3f}"
              + f" all_goals={verdict(all(g[1] for g in goals.values()))}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_model(), "cpu_kind": cpu_kind(),
                  "cpus": psutil.cpu_count(), "python": platform.python_version(), "export": export_dir,
                  "reference": ref, **m, "goals": goals, "args": vars(args) | {"json": str(args.json)}}
        with open(args.json, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
    record_run(args, "serve_throughput", figures_of(result))
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
