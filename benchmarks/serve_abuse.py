"""`estimator-mnist serve` beside abusive clients (issue 58): one measured client on 127.0.0.1 sends 1-image
Predicts one after another; quiet is the same server, the same run, --requests (200) of them alone. Then, per
case, the same --requests beside: a client sending 2,000-image packed Predicts one after another; 1,000 images as
float_val; 300 Predicts with a 50 ms deadline at once, every second; tiny-but-huge Predicts (56 bytes declaring
10,000 images) one after another; 100 idle REST connections and a client sending its head a byte every 0.5 s
(here the measured client also sends REST requests, each on a new connection, against REST's quiet); a client
keeping 8 tiny-but-huge Predicts in flight beside a second client sending a 1-image Predict every 50 ms; random
model names. The abusers run from 127.0.0.2 (the second client from 127.0.0.3), each in a process of its own
(serve_abusers.py). Last, all of them at once and SIGTERM: the exit's time against its documented bound, and the
measured client's requests by outcome (answered, refused to connect, or reset).

Per case it prints the 1-image p99 against quiet (the ratio), failures (any status but OK for a 1-image request,
the measured client's and the second client's), the server's RSS, with the CPU kind; the goals (issue 58: p99
within 3x of quiet in every case, none failed, RSS within 10% of before, the metrics page naming no client) as
PASS or FAIL; nothing is asserted. The last line (RESULT ...) goes to the results file too (results.py).
--floor runs each case again with its abusers aimed at a second serve of the same model: on 2 cores the abusers'
own CPU and bytes slow the measured client even when serve does nothing for them, and that ratio is the floor.

    python benchmarks/serve_abuse.py --model runs/local
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import threading
import time

import numpy as np
import psutil
import requests

from common import benchmark_parser
from cpu_facts import cpu_kind, cpu_model
from results import figures_of, record_run
from serve_abusers import abuse, CASES, SECOND_CLIENT
from serve_throughput import start_server
from estimator_mnist.config import timeouts
from tests.serve_wire import PREDICT, predict_bytes, raw_channel  # noqa: E402

GOAL_P99_RATIO, GOAL_RSS_GROWTH = 3.0, 0.10
REST_BODY = {"signature_name": "images", "instances": np.zeros((1, 28, 28, 1)).tolist()}
DRAIN_SECS = 5.0  # the SIGTERM case's --drain-secs


def measure_grpc(predict, count: int) -> dict:
    body, latencies, failures = predict_bytes(1), [], []
    for _ in range(count):
        started = time.perf_counter()
        try:
            predict(body, timeout=30)
        except Exception as exc:  # pylint: disable=broad-except  # grpc.RpcError: counted, the client goes on
            failures.append(f"{exc.code().name}: {exc.details()}"[:160] if hasattr(exc, "code") else str(exc)[:160])
        latencies.append(time.perf_counter() - started)
    return {"p50_ms": float(np.percentile(latencies, 50) * 1000), "p99_ms": float(np.percentile(latencies, 99) * 1000),
            "failed": len(failures), "failures": failures[:2]}


def measure_rest(url: str, count: int) -> dict:
    latencies, failures = [], []
    for _ in range(count):
        started = time.perf_counter()
        try:
            answer = requests.post(url, json=REST_BODY, timeout=30)  # a new connection each time
            if answer.status_code != 200:
                failures.append(f"{answer.status_code}: {answer.text[:120]}")
        except requests.RequestException as exc:
            failures.append(str(exc)[:160])
        latencies.append(time.perf_counter() - started)
    return {"p50_ms": float(np.percentile(latencies, 50) * 1000), "p99_ms": float(np.percentile(latencies, 99) * 1000),
            "failed": len(failures), "failures": failures[:2]}


class Abusers:
    """A case's abusers, each a spawned process, under way on entering, stopped and joined on leaving."""

    def __init__(self, kinds, grpc_port: int, rest_port: int):
        context = multiprocessing.get_context("spawn")
        self.manager, self.stop = context.Manager(), context.Event()
        self.counts = {kind: self.manager.dict() for kind, _ in kinds}
        self.readies = [context.Event() for _ in kinds]
        self.processes = [context.Process(target=abuse, args=(kind, source, grpc_port, rest_port, self.stop, ready,
                                                              self.counts[kind]))
                          for (kind, source), ready in zip(kinds, self.readies)]

    def __enter__(self):
        for process in self.processes:
            process.start()
        for ready in self.readies:
            ready.wait(60)
        time.sleep(1.0)  # the abuse under way before the measured client starts
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for process in self.processes:
            process.join(60)
        self.outcomes = {kind: dict(counts) for kind, counts in self.counts.items()}
        self.manager.shutdown()


def rss_mib(proc) -> float:
    return psutil.Process(proc.pid).memory_info().rss / 2 ** 20


def load() -> str:
    return "load %.1f" % psutil.getloadavg()[0]


def run_case(case: str, proc, predict, ports, rest_url: str, count: int, quiet: dict, label: str = "") -> dict:
    """One case's abusers against `ports` (serve's own, or --floor's second serve) beside the measured client."""
    before = rss_mib(proc)
    with Abusers(CASES[case], *ports) as abusers:
        figures = measure_rest(rest_url, count) if case == "idle_and_slow_rest" else measure_grpc(predict, count)
    second = abusers.outcomes.get("every_50ms", {})
    figures.update(case=case, rss_before=before, rss_after=rss_mib(proc), abuser=abusers.outcomes,
                   second_failed=sum(n for code, n in second.items() if code != "OK"))
    reference = quiet["rest" if case == "idle_and_slow_rest" else "grpc"]["p99_ms"]
    figures["ratio"] = figures["p99_ms"] / reference
    print(f"{label or case:18s}: 1-image p99 {figures['p99_ms']:6.1f} ms = {figures['ratio']:4.1f}x quiet "
          f"(p50 {figures['p50_ms']:.1f} ms), failures {figures['failed'] + figures['second_failed']}, "
          f"RSS {before:.0f} -> {figures['rss_after']:.0f} MiB, {load()}; abusers {abusers.outcomes}"
          + (f"; e.g. {figures['failures'][0]}" if figures["failures"] else ""), flush=True)
    return figures


def sigterm_under_everything(model: str, extra: list, count_secs: float = 3.0) -> dict:
    """A server of its own: every abuser at once and the measured client, then SIGTERM: the exit's seconds
    against delay + drain + answer + close, and the measured client's requests answered, refused, or reset."""
    proc, _, grpc_port = start_server(model, ["--drain-delay-secs", "0", "--drain-secs", str(DRAIN_SECS), *extra])
    rest_port = int(_.split(":")[2].split("/")[0])
    kinds = sorted({pair for pairs in CASES.values() for pair in pairs})
    outcomes, stop = {"answered": 0, "refused_to_connect": 0, "reset": 0}, threading.Event()
    channel = raw_channel(grpc_port)
    predict = channel.unary_unary(PREDICT)

    def client():
        body = predict_bytes(1)
        while not stop.is_set():
            try:
                predict(body, timeout=30)
                outcomes["answered"] += 1
            except Exception as exc:  # pylint: disable=broad-except  # grpc.RpcError
                details = exc.details() or ""
                kind = "answered" if "is stopping" in details else \
                    "refused_to_connect" if "failed to connect" in details.lower() else "reset"
                outcomes[kind] += 1
                time.sleep(0.05)

    with Abusers(kinds, grpc_port, rest_port):
        thread = threading.Thread(target=client)
        thread.start()
        time.sleep(count_secs)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        exit_secs = time.monotonic() - signalled
        stop.set()
        thread.join(60)
    channel.close()
    bound = DRAIN_SECS + timeouts.SERVE_ANSWER_SECS + timeouts.SERVE_CLOSE_SECS
    print(f"SIGTERM under every abuser at once: exit {code} after {exit_secs:.1f} s (bound {bound:g} s); "
          f"the measured client's requests: {outcomes}", flush=True)
    return {"exit_code": code, "exit_secs": exit_secs, "bound": bound, **outcomes}


def metrics_page(url: str) -> str:
    return requests.get(url.split("/v1/")[0] + "/monitoring/prometheus/metrics", timeout=30).text


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__, not_measured=("model",))
    parser.add_argument("--model", required=True, help="an export, a model_dir or a run directory")
    parser.add_argument("--requests", type=int, default=200, help="1-image requests per case and quiet (200)")
    parser.add_argument("--switch-interval-ms", type=float, help="serve's GIL switch interval (default: serve's)")
    parser.add_argument("--cases", default=",".join([*CASES, "sigterm"]),
                        help="which cases, comma-separated (all, and sigterm: every abuser at once, then SIGTERM)")
    parser.add_argument("--floor", action="store_true",
                        help="each case again with its abusers aimed at a second serve of the same model: what the "
                             "abusers' own CPU and bytes cost the measured client on this machine, serve aside")
    args = parser.parse_args(argv)
    extra = [] if args.switch_interval_ms is None else ["--switch-interval-ms", str(args.switch_interval_ms)]
    print(f"CPU: {cpu_model()} ({cpu_kind()}), {psutil.cpu_count()} CPUs; {load()}", flush=True)
    proc, url, grpc_port = start_server(args.model, ["--drain-delay-secs", "0", *extra])
    rest_port = int(url.split(":")[2].split("/")[0])
    channel = raw_channel(grpc_port)
    predict = channel.unary_unary(PREDICT)
    try:
        measure_grpc(predict, 50)  # warm-up
        measure_rest(url, 20)
        rss_start, page_start = rss_mib(proc), metrics_page(url)
        quiet = {"grpc": measure_grpc(predict, args.requests), "rest": measure_rest(url, args.requests)}
        print(f"{'quiet':18s}: 1-image p99 gRPC {quiet['grpc']['p99_ms']:.1f} ms (p50 {quiet['grpc']['p50_ms']:.1f}),"
              f" REST {quiet['rest']['p99_ms']:.1f} ms (p50 {quiet['rest']['p50_ms']:.1f}); RSS {rss_start:.0f} MiB, "
              f"{load()}", flush=True)
        cases = [case for case in args.cases.split(",") if case != "sigterm"]
        results = [run_case(case, proc, predict, (grpc_port, rest_port), url, args.requests, quiet) for case in cases]
        floors = elsewhere(args, extra, cases, proc, predict, url, quiet) if args.floor else []
        time.sleep(3.0)  # serve hands freed memory back every 2 s
        rss_growth, page = rss_mib(proc) / rss_start - 1, metrics_page(url)
    finally:
        channel.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    drain = sigterm_under_everything(args.model, extra) if "sigterm" in args.cases.split(",") else None
    return report(args, results, rss_growth, page, page_start, drain, floors)


def elsewhere(args, extra: list, cases: list, proc, predict, url: str, quiet: dict) -> list:
    """--floor: each case's abusers aimed at a second serve while the measured client asks the first."""
    other, other_url, other_grpc = start_server(args.model, ["--drain-delay-secs", "0", *extra])
    ports = (other_grpc, int(other_url.split(":")[2].split("/")[0]))
    try:
        return [run_case(case, proc, predict, ports, url, args.requests, quiet, label=f"{case} elsewhere")
                for case in cases]
    finally:
        other.send_signal(signal.SIGINT)
        other.wait(60)


def report(args, results: list, rss_growth: float, page: str, page_start: str, drain: dict, floors: list) -> int:
    worst = max(r["ratio"] for r in results)
    failed = sum(r["failed"] + r["second_failed"] for r in results)
    names_client = any(address in page for address in ("127.0.0.", SECOND_CLIENT))
    goals = {"p99_within_3x": worst <= GOAL_P99_RATIO, "none_failed": failed == 0,
             "rss_within_10%": rss_growth <= GOAL_RSS_GROWTH, "metrics_name_no_client": not names_client,
             "sigterm_within_bound_none_reset": drain is None or drain["exit_secs"] <= drain["bound"] and not drain["reset"]}
    for name, passed in goals.items():
        print(f"goal {name}: {'PASS' if passed else 'FAIL'}")
    result = ("RESULT " + " ".join(f"p99_ratio_{r['case']}={r['ratio']:.2f}" for r in results)
              + "".join(f" floor_p99_ratio_{r['case']}={r['ratio']:.2f}" for r in floors)
              + f" worst_p99_ratio={worst:.2f} failed={failed} rss_growth={rss_growth:.3f}"
              + f" metrics_growth_bytes={len(page) - len(page_start)}"
              + (f" sigterm_exit_secs={drain['exit_secs']:.1f} sigterm_reset={drain['reset']}" if drain else "")
              + f" all_goals={'PASS' if all(goals.values()) else 'FAIL'}")
    record_run(args, "serve_abuse", figures_of(result))
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
