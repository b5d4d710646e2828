"""The abusive clients of benchmarks/serve_abuse.py, each run in a process of its own (so that it does not share
the measured client's GIL) from another loopback address than the measured client's 127.0.0.1: 127.0.0.2 for
the abusers, 127.0.0.3 for a second, well-behaved client. gRPC's Python client cannot choose its source
address, so its channel connects to a Forwarder, which makes each connection to serve from that address."""

from __future__ import annotations

import random
import socket
import threading
import time

from tests.serve_wire import PREDICT, predict_bytes, raw_channel, STATUS, status_bytes, tiny_huge_bytes

ABUSER, SECOND_CLIENT = "127.0.0.2", "127.0.0.3"
LARGEST = 10000  # serve's --max-images-per-request default
IDLE_CONNECTIONS = 100
BYTE_EVERY_SECS = 0.5
# case -> the abusers run beside the measured client, each (kind, source address)
CASES = {
    "packed_2000": [("packed_2000", ABUSER)],
    "float_val_1000": [("float_val_1000", ABUSER)],
    "deadlines_300": [("deadlines_300", ABUSER)],
    "tiny_huge": [("tiny_huge", ABUSER)],
    "idle_and_slow_rest": [("idle_and_slow_rest", ABUSER)],
    "in_flight_8": [("in_flight_8", ABUSER), ("every_50ms", SECOND_CLIENT)],
    "names": [("names", ABUSER)],
}


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(1 << 16)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Forwarder:
    """Connections to 127.0.0.1:`port`, each made from `source`: a channel connects to (source, self.port)."""

    def __init__(self, source: str, port: int):
        self.source, self.target = source, port
        self.listener = socket.create_server((source, 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target), source_address=(self.source, 0))
            except OSError:
                return
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for ends in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=ends, daemon=True).start()


class Counts:
    """Each outcome's status code, counted into a Manager dict shared with the benchmark."""

    def __init__(self, shared):
        self.shared, self.lock = shared, threading.Lock()

    def add(self, code: str) -> None:
        with self.lock:
            self.shared[code] = self.shared.get(code, 0) + 1

    def of_future(self, future) -> None:
        self.add(future.code().name if future.exception() is not None else "OK")

    def call(self, method, body: bytes, timeout: float) -> None:
        import grpc  # pylint: disable=import-outside-toplevel

        try:
            method(body, timeout=timeout)
            self.add("OK")
        except grpc.RpcError as exc:
            self.add(exc.code().name)


def _one_after_another(predict, body: bytes, stop, counts: Counts) -> None:
    while not stop.is_set():
        counts.call(predict, body, 60)


def _deadlines(predict, stop, counts: Counts) -> None:
    body = predict_bytes(200)
    while not stop.wait(1.0):
        for _ in range(300):
            predict.future(body, timeout=0.05).add_done_callback(counts.of_future)


def _in_flight(predict, stop, counts: Counts, count: int = 8) -> None:
    body = tiny_huge_bytes(LARGEST)

    def send(_=None):
        if _ is not None:
            counts.of_future(_)
        if not stop.is_set():
            predict.future(body, timeout=60).add_done_callback(send)

    for _ in range(count):
        send()
    stop.wait()


def _names(channel, stop, counts: Counts) -> None:
    predict, status = channel.unary_unary(PREDICT), channel.unary_unary(STATUS)
    rng = random.Random(1)
    while not stop.is_set():
        name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12))
        counts.call(status, status_bytes(name), 10)
        counts.call(predict, predict_bytes(1, name=name), 10)


def _idle_and_slow_rest(rest_port: int, source: str, stop, counts: Counts) -> None:
    """IDLE_CONNECTIONS connections that send nothing, and one that sends its head a byte every half second,
    each made again when serve closes it (its idle and receive bounds)."""
    def connect():
        return socket.create_connection(("127.0.0.1", rest_port), source_address=(source, 0))

    idle = [connect() for _ in range(IDLE_CONNECTIONS)]
    head = b"GET /v1/models/mnist HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 10000
    slow, sent = connect(), 0
    while not stop.wait(BYTE_EVERY_SECS):
        try:
            slow.sendall(head[sent % len(head):sent % len(head) + 1])
            sent += 1
        except OSError:
            counts.add("slow_connection_closed")
            try:
                slow, sent = connect(), 0
            except OSError:  # serve stopped accepting (the SIGTERM case)
                break
    for sock in idle + [slow]:
        sock.close()


def _every_50ms(predict, stop, counts: Counts) -> None:
    body = predict_bytes(1, seed=3)
    while not stop.wait(0.05):
        counts.call(predict, body, 30)


def abuse(kind: str, source: str, grpc_port: int, rest_port: int, stop, ready, shared) -> None:
    """One client of `kind` from `source`, until `stop` is set; `ready` set once it is under way."""
    counts = Counts(shared)
    if kind == "idle_and_slow_rest":
        ready.set()
        _idle_and_slow_rest(rest_port, source, stop, counts)
        return
    forwarder = Forwarder(source, grpc_port)
    channel = raw_channel(forwarder.port, host=source)
    predict = channel.unary_unary(PREDICT)
    ready.set()
    if kind in ("packed_2000", "float_val_1000"):
        _one_after_another(predict, predict_bytes(2000 if kind == "packed_2000" else 1000,
                                                  packed=kind == "packed_2000"), stop, counts)
    elif kind == "tiny_huge":
        _one_after_another(predict, tiny_huge_bytes(LARGEST), stop, counts)
    elif kind == "deadlines_300":
        _deadlines(predict, stop, counts)
    elif kind == "in_flight_8":
        _in_flight(predict, stop, counts)
    elif kind == "every_50ms":
        _every_50ms(predict, stop, counts)
    else:
        _names(channel, stop, counts)
    time.sleep(1.0)  # the last answers
    channel.close()
