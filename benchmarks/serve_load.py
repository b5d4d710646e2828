"""Load for benchmarks/serve_throughput.py: REST and gRPC clients sending single-image Predicts without pause,
each client on its own connection, and SIGTERM under 16 of them (the drain)."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import requests

SIGNAL_AFTER_SECS = 2.0


def _summary(clients: int, total: int, wall: float, latencies: list) -> dict:
    milliseconds = np.array(latencies) * 1000
    return {"clients": clients, "requests": total, "requests_per_sec": total / wall,
            "p50_ms": float(np.percentile(milliseconds, 50)), "p99_ms": float(np.percentile(milliseconds, 99)),
            "latencies": latencies}


def interleaved(rounds: int, loads: dict) -> dict:
    """{name: summary}: each load of `loads` ({name: load(total)}) run in turn, `rounds` times, so that a burst
    of other work on shared cores falls on every one alike; requests/s is the median round's, the latencies
    those of every round."""
    runs = {name: [] for name in loads}
    for _ in range(rounds):
        for name, load in loads.items():
            runs[name].append(load())
    out = {}
    for name, summaries in runs.items():
        latencies = [value for summary in summaries for value in summary.pop("latencies")]
        rates = [summary["requests_per_sec"] for summary in summaries]
        out[name] = _summary(summaries[0]["clients"], sum(s["requests"] for s in summaries), 1.0, latencies)
        out[name].pop("latencies")
        out[name]["requests_per_sec"] = float(np.median(rates))
        out[name]["rounds_requests_per_sec"] = [round(rate, 1) for rate in rates]
    return out


def _run(clients: int, work) -> float:
    threads = [threading.Thread(target=work, args=(index,)) for index in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def rest_load(url: str, bodies: list, clients: int, total: int) -> dict:
    """`total` requests from `clients` threads, each with its own keep-alive connection; every answer must be 200."""
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

    wall = _run(clients, client)
    if failures:
        raise SystemExit(f"{len(failures)} REST requests failed, e.g. {failures[0]}")
    return _summary(clients, total, wall, latencies)


def grpc_stub(port: int):
    """A PredictionService stub on a channel of its own (not one shared subchannel): one connection per client."""
    import grpc  # pylint: disable=import-outside-toplevel
    from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=import-outside-toplevel

    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
    return prediction_service_pb2_grpc.PredictionServiceStub(channel), channel


def grpc_requests(pngs: list) -> list:
    """One PredictRequest per PNG, made as Serving's documentation makes them (tf.make_tensor_proto)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=import-outside-toplevel

    made = []
    for png in pngs:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "mnist"
        request.inputs["image_bytes"].CopyFrom(tf.make_tensor_proto([png]))
        made.append(request)
    return made


def grpc_load(port: int, predicts: list, clients: int, total: int) -> dict:
    """As rest_load, over gRPC: `clients` channels, each its own connection; every call must succeed."""
    import grpc  # pylint: disable=import-outside-toplevel

    latencies, failures, lock = [], [], threading.Lock()
    stubs = [grpc_stub(port) for _ in range(clients)]

    def client(index: int):
        stub = stubs[index][0]
        for number in range(index, total, clients):
            started = time.perf_counter()
            try:
                stub.Predict(predicts[number % len(predicts)], timeout=60)
            except grpc.RpcError as exc:
                with lock:
                    failures.append(f"{exc.code()}: {exc.details()}")
            with lock:
                latencies.append(time.perf_counter() - started)

    wall = _run(clients, client)
    for _, channel in stubs:
        channel.close()
    if failures:
        raise SystemExit(f"{len(failures)} gRPC requests failed, e.g. {failures[0]}")
    return _summary(clients, total, wall, latencies)


def drain_under_load(proc, url: str, port: int, body: bytes, predict, clients: int = 16) -> dict:
    """Half REST, half gRPC clients sending without pause; SIGTERM after SIGNAL_AFTER_SECS. Counts each outcome
    by when its request was sent: before the signal every one must be answered 200."""
    import grpc  # pylint: disable=import-outside-toplevel

    log, lock, until = [], threading.Lock(), threading.Event()
    stubs = [grpc_stub(port) for _ in range(clients // 2)]

    def rest(index: int):
        session = requests.Session()
        while not until.is_set():
            sent = time.monotonic()
            try:
                status = str(session.post(url, data=body, headers={"Content-Type": "application/json"},
                                          timeout=60).status_code)
            except requests.ConnectionError:
                status = "refused"
                time.sleep(0.05)
            with lock:
                log.append((sent, status))

    def rpc(index: int):
        while not until.is_set():
            sent = time.monotonic()
            try:
                stubs[index // 2][0].Predict(predict, timeout=60)
                status = "200"
            except grpc.RpcError as exc:
                refused = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)  # CANCELLED: a
                status = "refused" if refused else str(exc.code())  # call that reached gRPC after its shutdown began
                time.sleep(0.05)
            with lock:
                log.append((sent, status))

    threads = [threading.Thread(target=rest if index % 2 else rpc, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(SIGNAL_AFTER_SECS)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    exit_code = proc.wait(120)
    exit_secs = time.monotonic() - signalled
    time.sleep(0.5)
    until.set()
    for thread in threads:
        thread.join(60)
    before = [status for sent, status in log if sent < signalled]
    after = [status for sent, status in log if sent >= signalled]
    return {"exit_code": exit_code, "exit_secs": exit_secs, "sent_before": len(before),
            "failed_before": sum(status != "200" for status in before), "sent_after": len(after),
            "answered_after": after.count("200"), "refused_after": after.count("503") + after.count("refused"),
            "other_after": sum(status not in ("200", "503", "refused") for status in after)}
