"""`estimator-mnist serve` as a process, probed as the operator of a public endpoint would (issue 52's checks),
with stand-in exports (random weights, the product's graph): large Predicts, packed and as float_val, do not hold
1-image ones; a flood of short-deadline Predicts leaves the service and its memory as they were; random model
names do not grow the metrics page; 100 MiB sent to :predict is answered 4xx long before it is all sent; SIGTERM
while 16 clients send and a new export loads exits 0 within the documented bound, no request reset."""

import base64
import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import requests

from estimator_mnist.config import timeouts
from tests.h2_streams import Connection, max_concurrent_streams, REFUSED_STREAM
from tests.process.test_serve_drain import Clients
from tests.serve_helpers import Server, write_exports_and_digits
from tests.serve_wire import PREDICT, predict_bytes, raw_channel, STATUS, status_bytes

SMALL_ANSWER_SECS = 1.0  # issue 52's check: a 1-image Predict answered within this while a large one runs
STREAMS_PER_CONNECTION = 16  # docs/serving.md: one connection's RPCs at once (grpc_server.py)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("serve_abuse")
    made = write_exports_and_digits(tmp_path / "staging", 2, tmp_path / "digits", 1)
    latest = tmp_path / "model" / "export" / "latest"
    latest.mkdir(parents=True)
    os.rename(made["exports"][0], latest / Path(made["exports"][0]).name)
    return {"model": tmp_path / "model", "latest": latest, "newer": made["exports"][1],
            "png": {"b64": base64.b64encode(Path(made["files"][0]).read_bytes()).decode()}}


@pytest.fixture(scope="module")
def server(made):
    server = Server(made["model"], "--poll-secs", "0.2")
    yield server
    server.stop()


def test_large_requests_packed_and_as_float_val_do_not_hold_1_image_requests(server):
    channel = raw_channel(server.grpc_port)
    predict, small = channel.unary_unary(PREDICT), predict_bytes(1)
    predict(small, timeout=30)
    for large in (predict_bytes(2000, packed=True), predict_bytes(1000, packed=False)):
        call = predict.future(large, timeout=60)
        waits = []
        while not call.done():
            started = time.monotonic()
            predict(small, timeout=30)
            waits.append(time.monotonic() - started)
            time.sleep(0.1)
        assert len(call.result()) > 1000 and waits  # answered, with 1-image requests in flight beside it
        assert max(waits) < SMALL_ANSWER_SECS, waits
        print(f"{len(large) / 1e6:.1f} MB request: {len(waits)} 1-image Predicts beside it, the slowest {max(waits):.3f} s")
    channel.close()


def _refused(call) -> bool:
    """UNAVAILABLE because gRPC's core refused the stream unread (HTTP/2's REFUSED_STREAM, code 7)."""
    import grpc  # pylint: disable=import-outside-toplevel

    return call.code() == grpc.StatusCode.UNAVAILABLE and f"error code {int(REFUSED_STREAM)}" in call.details()


def test_a_flood_of_short_deadline_requests_leaves_service_and_memory_as_they_were(server):
    import grpc  # pylint: disable=import-outside-toplevel

    channel = raw_channel(server.grpc_port)
    predict = channel.unary_unary(PREDICT)
    predict(predict_bytes(1), timeout=30)
    rss_before = psutil.Process(server.proc.pid).memory_info().rss
    body = predict_bytes(200)
    flood = [predict.future(body, timeout=0.05) for _ in range(300)]
    codes = {call.code() for call in flood}
    assert codes <= {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OK,
                     grpc.StatusCode.UNAVAILABLE}, {call.details() for call in flood}
    # UNAVAILABLE only for the streams beyond the connection's 16 (STREAMS_PER_CONNECTION): refused unread with
    # HTTP/2's REFUSED_STREAM (code 7), which a client may retry.
    assert all(_refused(call) for call in flood if call.code() == grpc.StatusCode.UNAVAILABLE)
    started = time.monotonic()
    other = raw_channel(server.grpc_port)  # another client: answered at its first try
    other.unary_unary(PREDICT)(predict_bytes(1), timeout=30)
    other.close()
    # The flood's own connection: serve frees a stream when its handler has ended, which can be some ms after the
    # client gave the stream up; so its next stream can be refused unread as well (1 flood in 8, quiet, Xeon
    # family 6 model 207; a fresh-clone CI run failed on it). A client retries that, as HTTP/2 allows.
    refused = 0
    while True:
        try:
            predict(predict_bytes(1), timeout=30)
            break
        except grpc.RpcError as error:
            assert _refused(error) and time.monotonic() - started < 3.0, (error.code(), error.details(), refused)
            refused += 1
            time.sleep(0.01)
    fresh = time.monotonic() - started
    assert fresh < 3.0
    time.sleep(1.0)
    rss_after = psutil.Process(server.proc.pid).memory_info().rss
    print(f"flood: {codes}; both clients then answered within {fresh:.3f} s (the flood's refused {refused} times); "
          f"RSS {rss_before >> 20} -> {rss_after >> 20} MiB")
    assert rss_after < rss_before * 1.3, (rss_before >> 20, rss_after >> 20)
    channel.close()


def test_one_connection_gets_16_requests_into_serve_at_once_and_the_next_ones_are_refused_unread(server):
    """Each RPC serve accepts costs its event loop Python work before any check of ours can refuse it (grpc.aio
    takes them one at a time, in arrival order): 300 Predicts fired at once on one connection must not all be
    taken ahead of another client's 1-image request. A client that keeps to the server's SETTINGS waits for a
    slot; one that does not (this one) has its streams beyond the 16th refused by gRPC's core, unread."""
    connection = Connection(server.grpc_port)
    try:
        announced = max_concurrent_streams(connection)
        streams = connection.open_streams(PREDICT, 3 * STREAMS_PER_CONNECTION)
        refused = connection.refused(wait_secs=3.0, expected=len(streams) - STREAMS_PER_CONNECTION)
    finally:
        connection.close()
    assert announced == STREAMS_PER_CONNECTION
    assert refused == {stream: REFUSED_STREAM for stream in streams[STREAMS_PER_CONNECTION:]}, refused


def test_random_model_names_do_not_grow_the_metrics_page(server):
    channel = raw_channel(server.grpc_port)
    status = channel.unary_unary(STATUS)
    status(status_bytes("mnist"), timeout=30)
    before = requests.get(server.url("/monitoring/prometheus/metrics"), timeout=30).text
    names = [uuid.uuid4().hex for _ in range(3000)]
    for name in names:
        status.future(status_bytes(name), timeout=30).exception()
    after = requests.get(server.url("/monitoring/prometheus/metrics"), timeout=30).text
    print(f"metrics page {len(before)} -> {len(after)} bytes after 3,000 random names")
    assert len(after) - len(before) <= 10 * 1024 and not any(name in after for name in names)
    channel.close()


def test_100_mib_posted_to_predict_is_answered_4xx_before_16_mib_is_sent(server):
    size, sent, answered = 100 << 20, [0], threading.Event()
    client = socket.create_connection(("127.0.0.1", server.port))
    client.sendall(f"POST /v1/models/mnist:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())

    def send():
        try:
            while sent[0] < size and not answered.is_set():
                sent[0] += client.send(b"1" * 65536)
        except OSError:
            pass

    sender = threading.Thread(target=send)
    sender.start()
    client.settimeout(30)
    head = client.recv(65536)
    at = sent[0]
    answered.set()
    sender.join(30)
    client.close()
    print(f"100 MiB POST: {head.splitlines()[0].decode()} after {at} bytes sent")
    assert head.startswith(b"HTTP/1.1 4") and at < 16 << 20, (head[:100], at)


def test_sigterm_while_16_clients_send_and_an_export_loads_exits_0_in_the_bound(made):
    server = Server(made["model"], "--poll-secs", "0.2", "--drain-delay-secs", str(timeouts.SERVE_DRAIN_DELAY_SECS))
    until = threading.Event()
    clients = Clients(server, made["png"], until)
    try:
        for thread in clients.threads:
            thread.start()
        time.sleep(1.0)
        os.rename(made["newer"], made["latest"] / Path(made["newer"]).name)
        time.sleep(0.3)  # the poller has begun to load it
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeouts.SERVE_EXIT_SECS + 10)
        exited = time.monotonic() - signalled
        server.lines.append(server.proc.stdout.read())
    finally:
        until.set()
        for thread in clients.threads:
            thread.join(30)
        clients.grpc.close()
        server.stop()
    print(f"SIGTERM to exit: {exited:.1f} s, outcomes {sorted({o for _, o in clients.log})}")  # pytest -s shows it
    assert code == 0 and exited < 25 and exited < timeouts.SERVE_EXIT_SECS + 1, (exited, "".join(server.lines))
    outcomes = {outcome for _, outcome in clients.log}
    assert "200" in outcomes and outcomes <= {"200", "503", "refused"}, [o for o in outcomes if o.startswith("w")]
