"""`estimator-mnist serve` in production, as a process: a model call that hangs ends its request at the deadline
while a newer export answers, then SIGTERM under 16 clients (REST and gRPC) sending without pause drains: no
request sent before it fails, later ones are answered for the delay and then refused, and it exits 0 in time."""

import base64
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import requests

from estimator_mnist.tf_model.serve.lifecycle import ERR_STOPPING
from tests.serve_helpers import Server, write_exports_and_digits

DEADLINE_SECS, DELAY_SECS, DRAIN_SECS = 20, 1.5, 10  # a deadline the newer export loads well within, under load
EXIT_BOUND_SECS = DELAY_SECS + DRAIN_SECS + 5  # docs/serving.md's bound (delay + drain + 3 s), and 2 s for Python's exit


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server whose first export hangs on every call; a normal newer one and PNG digits aside."""
    tmp_path = tmp_path_factory.mktemp("serve_drain")
    made = write_exports_and_digits(tmp_path / "staging", 2, tmp_path / "digits", 2, hang_first=True)
    latest = tmp_path / "model" / "export" / "latest"
    latest.mkdir(parents=True)
    hanging = latest / Path(made["exports"][0]).name
    os.rename(made["exports"][0], hanging)
    server = Server(tmp_path / "model", "--poll-secs", "0.2", "--request-timeout-ms", str(DEADLINE_SECS * 1000),
                    "--drain-delay-secs", str(DELAY_SECS), "--drain-secs", str(DRAIN_SECS))
    try:
        yield {"server": server, "hanging": hanging, "newer": made["exports"][1], "latest": latest,
               "png": {"b64": base64.b64encode(Path(made["files"][0]).read_bytes()).decode()}}
    finally:
        server.stop()


def test_a_hung_call_ends_at_its_deadline_while_a_newer_export_answers(served):
    from tests.serve_grpc import code_of, GrpcClient  # pylint: disable=import-outside-toplevel  # TensorFlow

    server, answers = served["server"], {}
    client = GrpcClient(server.grpc_port)

    def hung_rest():
        started = time.monotonic()
        answers["rest"] = (server.predict({"instances": [served["png"]]}), time.monotonic() - started)

    def hung_grpc():
        started = time.monotonic()
        request = client.predict_request({"image_bytes": [base64.b64decode(served["png"]["b64"])]})
        answers["grpc"] = (code_of(client.predictions.Predict, request, timeout=60), time.monotonic() - started)

    threads = [threading.Thread(target=hung_rest), threading.Thread(target=hung_grpc)]
    for thread in threads:
        thread.start()
    newer = served["latest"] / Path(served["newer"]).name
    os.rename(served["newer"], newer)
    server.wait_for_version(int(newer.name), timeout=DEADLINE_SECS)
    answer = server.predict({"instances": [served["png"]]})  # the newer export answers while the old calls hang
    assert answer.status_code == 200 and answer.headers["X-Model-Version"] == newer.name
    assert all(thread.is_alive() for thread in threads)
    for thread in threads:
        thread.join(DEADLINE_SECS + 10)
    rest, rest_secs = answers["rest"]
    assert rest.status_code == 504 and rest.json()["error"].startswith("Deadline exceeded: the request was not answe")
    (code, details), grpc_secs = answers["grpc"]
    assert code.name == "DEADLINE_EXCEEDED" and details.startswith("Deadline exceeded")
    assert DEADLINE_SECS - 0.5 < rest_secs < DEADLINE_SECS + 10 and DEADLINE_SECS - 0.5 < grpc_secs < DEADLINE_SECS + 10
    server.wait_for_version(int(served["hanging"].name), state="END", timeout=10)  # unloading waited a bounded time
    client.close()


class Clients:
    """16 clients sending without pause, half REST (keep-alive sessions), half gRPC: (sent, outcome) each."""

    def __init__(self, server, png, until: threading.Event):
        from tests.serve_grpc import GrpcClient  # pylint: disable=import-outside-toplevel  # TensorFlow

        self.server, self.png, self.until, self.log, self.lock = server, png, until, [], threading.Lock()
        self.grpc = GrpcClient(server.grpc_port)
        self.request = self.grpc.predict_request({"image_bytes": [base64.b64decode(png["b64"])]})
        self.threads = [threading.Thread(target=self.rest if i % 2 else self.rpc) for i in range(16)]

    def record(self, sent: float, outcome: str) -> None:
        with self.lock:
            self.log.append((sent, outcome))

    def rest(self):
        session = requests.Session()
        while not self.until.is_set():
            sent = time.monotonic()
            try:
                answer = session.post(self.server.url("/v1/models/mnist:predict"), json={"instances": [self.png]},
                                      timeout=30)
                ok = answer.status_code == 200 or (answer.status_code == 503 and answer.json() == {
                    "error": ERR_STOPPING})
                self.record(sent, str(answer.status_code) if ok else f"wrong {answer.status_code} {answer.text}")
            except requests.ConnectionError:
                self.record(sent, "refused")
                time.sleep(0.05)

    def rpc(self):
        import grpc  # pylint: disable=import-outside-toplevel

        while not self.until.is_set():
            sent = time.monotonic()
            try:
                self.grpc.predictions.Predict(self.request, timeout=30)
                self.record(sent, "200")
            except grpc.RpcError as exc:
                # UNAVAILABLE: refused by serve or by a closed port; CANCELLED: gRPC's own answer to a call that
                # reached the transport after its shutdown began (never to one a handler had accepted)
                refused = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
                self.record(sent, "refused" if refused else f"wrong {exc}")
                time.sleep(0.05)


def test_sigterm_under_16_clients_drains_and_exits_0_in_time(served):
    server, until = served["server"], threading.Event()
    clients = Clients(server, served["png"], until)
    for thread in clients.threads:
        thread.start()
    time.sleep(2)
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    ready = requests.get(server.url("/estimator-mnist/ready"), timeout=10)
    status = requests.get(server.url("/v1/models/mnist"), timeout=10).json()["model_version_status"][0]
    code = server.proc.wait(EXIT_BOUND_SECS)
    exited = time.monotonic() - signalled
    time.sleep(0.5)
    until.set()
    for thread in clients.threads:
        thread.join(30)
    clients.grpc.close()
    before = [outcome for sent, outcome in clients.log if sent < signalled]
    during_delay = [outcome for sent, outcome in clients.log if signalled + 0.2 < sent < signalled + DELAY_SECS - 0.2]
    after = [outcome for sent, outcome in clients.log if sent > signalled + DELAY_SECS + 0.2]
    assert code == 0 and exited < EXIT_BOUND_SECS, "".join(server.lines)
    assert ready.status_code == 503 and ready.json() == {"ready": False, "draining": True}
    assert status["state"] == "UNLOADING"
    assert len(before) > 20 and set(before) == {"200"}  # nothing accepted before the drain failed
    assert during_delay and set(during_delay) == {"200"}  # answered while load balancers notice
    assert after and set(after) <= {"503", "refused"}  # refused, not lost
    wrong = [(round(sent - signalled, 2), outcome) for sent, outcome in clients.log if outcome.startswith("wrong")]
    assert not wrong, f"exited after {exited:.2f} s: {wrong[:3]}"
