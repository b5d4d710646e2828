"""`estimator-mnist serve` under load: requests/s and p50/p99 latency for 1 and 16 concurrent clients, each
sending single-image `serving_default` requests (a MNIST test digit as a PNG in b64), from this machine.

The reference is a loop in this process calling the loaded SavedModel's
`serving_default` (tf.saved_model.load) with the same PNGs, one image per
call; the TF1 session Serving itself uses is printed beside it. Then 1,000
malformed requests, and the server's resident memory after them against
after the warm-up. The goals are printed as PASS or FAIL; nothing is
asserted. --json appends one line of every figure; the last line, RESULT
reference_images_per_sec=... requests_per_sec_1=... p50_ms_1=... p99_ms_1=...
requests_per_sec_16=... ... rss_growth=... all_goals=PASS|FAIL, goes to the
results file (benchmarks/results.py) as well.

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

from estimator_mnist.plan.cpu import cpu_kind, cpu_model
from estimator_mnist.plan.hosts import free_loopback_ports

from common import REPO, benchmark_parser
from results import figures_of, record_run

GOAL_THROUGHPUT = 0.7  # 16 clients' images/s over the reference loop's
GOAL_P99_MS = 50.0  # at 1 client
GOAL_RSS_GROWTH = 0.10  # after the malformed requests, over after the warm-up
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
    port = free_loopback_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "estimator_mnist", "serve", "--model", model, "--port", str(port),
                             *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if "the page: " in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its pipe drained
            return proc, f"http://127.0.0.1:{port}/v1/models/mnist:predict"
    raise SystemExit(f"serve exited with {proc.wait()} before it served")


def load(url: str, bodies: list, clients: int, total: int) -> dict:
    """`total` requests from `clients` threads, each with its own connection; every answer must be 200."""
    latencies, failures, lock = [], [], threading.Lock()

    def client(index: int):
        session = requests.Session()
        for number in range(index, total, clients):
            started = time.perf_counter()
            answer = session.post(url, data=bodies[number % len(bodies)],
                                  headers={"Content-Type": "application/json"}, timeout=60)
            with lock:
                latencies.append(time.perf_counter() - started)
                if answer.status_code != 200:
                    failures.append(answer.text[:200])

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    milliseconds = np.array(latencies) * 1000
    return {"clients": clients, "requests": total, "requests_per_sec": total / wall,
            "p50_ms": float(np.percentile(milliseconds, 50)), "p99_ms": float(np.percentile(milliseconds, 99))}


def malformed(url: str, count: int) -> int:
    session = requests.Session()
    statuses = [session.post(url, data=MALFORMED[i % len(MALFORMED)], timeout=60).status_code for i in range(count)]
    return statuses.count(400)


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, json_help="append one JSON line of every figure to this file",
                              not_measured=("model",))
    parser.add_argument("--model", required=True, help="an export, a model_dir or a run directory")
    parser.add_argument("--requests", type=int, default=600, help="requests per client count (default 600)")
    parser.add_argument("--digits", type=int, default=100, help="distinct test digits sent (default 100)")
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
    proc, url = start_server(export_dir, args.serve_args.split())
    try:
        load(url, bodies, 1, 50)  # warm-up
        rss_warm = psutil.Process(proc.pid).memory_info().rss
        levels = [load(url, bodies, clients, args.requests) for clients in (1, 16)]
        for level in levels:
            print(f"{level['clients']:2d} clients: {level['requests_per_sec']:6.0f} requests/s  p50 "
                  f"{level['p50_ms']:5.1f} ms  p99 {level['p99_ms']:5.1f} ms", flush=True)
        rejected = malformed(url, args.malformed)
        alive = proc.poll() is None and load(url, bodies, 1, 10)["requests"] == 10
        rss_after = psutil.Process(proc.pid).memory_info().rss
    finally:
        proc.send_signal(2)
        exit_code = proc.wait(60)
    growth = rss_after / rss_warm - 1
    ratio = levels[1]["requests_per_sec"] / ref["tf2_saved_model_images_per_sec"]
    print(f"{args.malformed} malformed requests: {rejected} answered 400; server up after them: {alive}; RSS "
          f"{rss_warm / 2**20:.0f} MiB after warm-up, {rss_after / 2**20:.0f} MiB after ({growth:+.1%}); "
          f"Ctrl-C exit {exit_code}")
    goals = {"16_clients_over_reference": (ratio, ratio >= GOAL_THROUGHPUT),
             "p99_ms_1_client": (levels[0]["p99_ms"], levels[0]["p99_ms"] < GOAL_P99_MS),
             "rss_growth": (growth, growth <= GOAL_RSS_GROWTH and alive and rejected == args.malformed)}
    print(f"goal 16 clients >= {GOAL_THROUGHPUT}x the reference loop: {ratio:.2f}x {verdict(goals['16_clients_over_reference'][1])}")
    print(f"goal p99 < {GOAL_P99_MS:.0f} ms at 1 client: {levels[0]['p99_ms']:.1f} ms {verdict(goals['p99_ms_1_client'][1])}")
    print(f"goal RSS growth <= {GOAL_RSS_GROWTH:.0%} after {args.malformed} malformed: {growth:+.1%} "
          f"{verdict(goals['rss_growth'][1])}")
    result = (f"RESULT reference_images_per_sec={ref['tf2_saved_model_images_per_sec']:.0f} "
              + " ".join(f"requests_per_sec_{level['clients']}={level['requests_per_sec']:.0f} "
                         f"p50_ms_{level['clients']}={level['p50_ms']:.1f} p99_ms_{level['clients']}={level['p99_ms']:.1f}"
                         for level in levels)
              + f" malformed_400={rejected} rss_growth={growth:.3f} all_goals={verdict(all(g[1] for g in goals.values()))}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_model(), "cpu_kind": cpu_kind(),
                  "cpus": psutil.cpu_count(), "python": platform.python_version(), "export": export_dir,
                  "reference": ref, "levels": levels, "malformed_400": rejected, "rss_warm": rss_warm,
                  "rss_after": rss_after, "goals": goals, "args": vars(args) | {"json": str(args.json)}}
        with open(args.json, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
    record_run(args, "serve_throughput", figures_of(result))
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
