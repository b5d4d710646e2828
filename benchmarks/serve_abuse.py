"""`estimator-mnist serve` under abusive traffic: 16 well-behaved gRPC clients, each sending a 1-image Predict
(a float image, tensor_content) 10 times a second, with their p99 latency (a) alone, (b) while another client
sends the largest allowed request (MNIST's test set, 10,000 images, 31.4 MB) every second, packed
(tensor_content), then (b') as float_val, as clients that fill the TensorProto field by field send it, (c) while
another fires 300 Predicts of 200 images with a 50 ms deadline every second, (d) while another sends
GetModelStatus and Predict with random model names without pause; the server's RSS and its metrics page's size
before and after each phase.

Goals (issue 52): (b)-(d) keep p99 within 3x of (a), no well-behaved request fails, RSS within 10% of the start,
the metrics page within 10 KB of the start. The abuser runs in a process of its own, so that it does not share
the well-behaved clients' GIL; the clients send raw bytes (made here, no TensorFlow), so that building a 31 MB
message costs the client nothing. The goals are printed as PASS or FAIL; nothing is asserted. The last line,
RESULT p99_ms_alone=... p99_ms_packed=... p99_ms_float_val=... p99_ms_deadlines=... p99_ms_names=...
failed=... rss_growth=... metrics_growth_bytes=... all_goals=PASS|FAIL, goes to the results file
(benchmarks/results.py) as well.

    python benchmarks/serve_abuse.py --model runs/local
"""

from __future__ import annotations

import multiprocessing
import random
import sys
import threading
import time

import numpy as np
import psutil
import requests

from common import benchmark_parser
from results import figures_of, record_run
from serve_throughput import start_server
from tests.serve_wire import PREDICT, predict_bytes, raw_channel, STATUS, status_bytes  # noqa: E402
CLIENTS, RATE = 16, 10.0  # well-behaved clients, and the requests per second each sends
LARGEST = 10000  # serving_api.MAX_INSTANCES
GOAL_P99_RATIO, GOAL_RSS_GROWTH, GOAL_METRICS_BYTES = 3.0, 0.10, 10 * 1024
PHASES = ("alone", "packed", "float_val", "deadlines", "names")


def abuse(kind: str, port: int, stop, counts) -> None:
    """One abuser, in a process of its own until `stop` is set; each outcome's code counted in `counts`."""
    import grpc  # pylint: disable=import-outside-toplevel

    channel = raw_channel(port)
    predict, status = channel.unary_unary(PREDICT), channel.unary_unary(STATUS)

    def count(future):
        code = future.code().name if future.exception() is not None else "OK"
        counts[code] = counts.get(code, 0) + 1

    if kind in ("packed", "float_val"):
        body = predict_bytes(LARGEST, packed=kind == "packed")
        while not stop.wait(1.0):
            predict.future(body, timeout=60).add_done_callback(count)
    elif kind == "deadlines":
        body = predict_bytes(200)
        while not stop.wait(1.0):
            for _ in range(300):
                predict.future(body, timeout=0.05).add_done_callback(count)
    else:
        rng = random.Random(1)
        while not stop.is_set():
            name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12))
            for call, body in ((status, status_bytes(name)), (predict, predict_bytes(1, name=name))):
                try:
                    call(body, timeout=10)
                    counts["OK"] = counts.get("OK", 0) + 1
                except grpc.RpcError as exc:
                    counts[exc.code().name] = counts.get(exc.code().name, 0) + 1
    time.sleep(2.0)  # the last answers
    channel.close()


def well_behaved(port: int, seconds: float) -> dict:
    """CLIENTS threads, each a channel of its own sending a 1-image Predict every 1/RATE s: p99 and failures."""
    body, latencies, failures, lock = predict_bytes(1), [], [], threading.Lock()
    end = time.monotonic() + seconds

    def client(index: int):
        channel = raw_channel(port)
        predict = channel.unary_unary(PREDICT)
        next_at = time.monotonic() + index / (CLIENTS * RATE)
        while next_at < end:
            time.sleep(max(next_at - time.monotonic(), 0.0))
            started = time.perf_counter()
            try:
                predict(body, timeout=30)
            except Exception as exc:  # pylint: disable=broad-except  # grpc.RpcError: counted, the client goes on
                with lock:
                    failures.append(str(exc)[:200])
            with lock:
                latencies.append(time.perf_counter() - started)
            next_at += 1.0 / RATE
        channel.close()

    threads = [threading.Thread(target=client, args=(index,)) for index in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"requests": len(latencies), "failed": len(failures), "failures": failures[:3],
            "p50_ms": float(np.percentile(latencies, 50) * 1000), "p99_ms": float(np.percentile(latencies, 99) * 1000)}


def snapshot(proc, metrics_url: str) -> dict:
    return {"rss": psutil.Process(proc.pid).memory_info().rss,
            "metrics_bytes": len(requests.get(metrics_url, timeout=30).content)}


def phase(kind: str, proc, grpc_port: int, metrics_url: str, seconds: float) -> dict:
    before = snapshot(proc, metrics_url)
    context = multiprocessing.get_context("spawn")
    stop, manager = context.Event(), context.Manager()
    counts = manager.dict()
    abuser = context.Process(target=abuse, args=(kind, grpc_port, stop, counts)) if kind != "alone" else None
    if abuser is not None:
        abuser.start()
        time.sleep(1.5)  # the abuse under way before the clients measure
    figures = well_behaved(grpc_port, seconds)
    if abuser is not None:
        stop.set()
        abuser.join(60)
    after = snapshot(proc, metrics_url)
    figures.update(before=before, after=after, abuser=dict(counts))
    manager.shutdown()
    print(f"{kind:9s}: {figures['requests']} requests, {figures['failed']} failed, p50 {figures['p50_ms']:.1f} ms, "
          f"p99 {figures['p99_ms']:.1f} ms; RSS {before['rss'] / 2**20:.0f} -> {after['rss'] / 2**20:.0f} MiB, "
          f"metrics {before['metrics_bytes']} -> {after['metrics_bytes']} bytes; abuser: {figures['abuser']}"
          + (f"; e.g. {figures['failures'][0]}" if figures["failures"] else ""), flush=True)
    return figures


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, not_measured=("model",))
    parser.add_argument("--model", required=True, help="an export, a model_dir or a run directory")
    parser.add_argument("--seconds", type=float, default=10.0, help="each phase's length (default 10)")
    args = parser.parse_args(argv)
    proc, url, grpc_port = start_server(args.model, ["--drain-delay-secs", "0"])
    metrics_url = url.split("/v1/")[0] + "/monitoring/prometheus/metrics"
    try:
        well_behaved(grpc_port, 2.0)  # warm-up
        results = {kind: phase(kind, proc, grpc_port, metrics_url, args.seconds) for kind in PHASES}
    finally:
        if proc.poll() is None:
            proc.send_signal(2)
            proc.wait(60)
    start = results["alone"]["before"]
    rss_growth = max(r["after"]["rss"] for r in results.values()) / start["rss"] - 1
    metrics_growth = max(r["after"]["metrics_bytes"] for r in results.values()) - start["metrics_bytes"]
    failed = sum(r["failed"] for r in results.values())
    worst = max(results[kind]["p99_ms"] for kind in PHASES[1:]) / results["alone"]["p99_ms"]
    goals = {"p99_within_3x": worst <= GOAL_P99_RATIO, "none_failed": failed == 0,
             "rss_within_10%": rss_growth <= GOAL_RSS_GROWTH, "metrics_within_10KB": metrics_growth <= GOAL_METRICS_BYTES}
    for name, passed in goals.items():
        print(f"goal {name}: {'PASS' if passed else 'FAIL'}")
    result = ("RESULT " + " ".join(f"p99_ms_{kind}={results[kind]['p99_ms']:.1f}" for kind in PHASES)
              + f" worst_p99_over_alone={worst:.2f} failed={failed} rss_growth={rss_growth:.3f}"
              + f" metrics_growth_bytes={metrics_growth} all_goals={'PASS' if all(goals.values()) else 'FAIL'}")
    record_run(args, "serve_abuse", figures_of(result))
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
