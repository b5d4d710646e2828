"""serve's gRPC server: grpc.aio on an event loop in a thread of its own, with both services, its message limit
and its bounds, and a graceful stop the drain waits on.

grpc.aio rather than grpc's threaded server: a request waiting for its
model call is a coroutine, not a thread, and each RPC costs no thread
hand-off, which on two cores is where the threaded server's time went under
16 clients. `maximum_concurrent_rpcs` bounds what is accepted at once
(beyond it: RESOURCE_EXHAUSTED); SO_REUSEPORT is off, so that a busy port is
an error rather than a port shared with another server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import grpc

from estimator_mnist.config import timeouts
from estimator_mnist.errors import UsageError
from estimator_mnist.tf_model.serve.grpc_api import add_services
from estimator_mnist.tf_model.serve.grpc_codec import Codec
from estimator_mnist.tf_model.serve.serving_api import ServingApi

# RPCs accepted at once; more get RESOURCE_EXHAUSTED. Each waiting RPC is a coroutine, and memory is bounded by
# the images queued (batcher.py) and the large messages waiting to be read (grpc_codec.py), so this is high
# enough that one client's flood of short-deadline requests cannot take every slot from the others.
MAX_RPCS = 1024
# One connection's RPCs at once (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS; beyond, gRPC's core refuses a stream
# unread). grpc.aio takes RPCs onto its loop one at a time, in arrival order, and each costs Python work before
# any check of serve's can refuse it; so 300 Predicts fired at once on one connection (100 let in at a time) kept
# another client's 1-image request waiting behind them: its p99 10x quiet (benchmarks/serve_abuse.py).
STREAMS_PER_CONNECTION = 16
# Keepalive, enforced: a client may ping at most every 10 s (more often, twice, and it gets GOAWAY); the server
# pings a connection quiet for 60 s and closes it if the ping is not answered in 20 s (a peer that vanished);
# a connection with no RPC for SERVE_IDLE_CONNECTION_SECS is closed (the client reconnects when it needs to).
CONNECTION_OPTIONS = [("grpc.max_concurrent_streams", STREAMS_PER_CONNECTION),
                      ("grpc.http2.min_recv_ping_interval_without_data_ms", 10000),
                      ("grpc.http2.min_ping_interval_without_data_ms", 10000),
                      ("grpc.http2.max_ping_strikes", 2), ("grpc.keepalive_permit_without_calls", 0),
                      ("grpc.keepalive_time_ms", 60000), ("grpc.keepalive_timeout_ms", 20000),
                      ("grpc.max_connection_idle_ms", int(timeouts.SERVE_IDLE_CONNECTION_SECS * 1000))]
ERR_BIND = "port {port} on {host} cannot be used (gRPC cannot bind it); give another with --grpc-port, or stop what holds it"


class GrpcServer:
    def __init__(self, api: ServingApi, host: str, port: int, max_message_bytes: int):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="serve-grpc", daemon=True)
        self._address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._host, self._port = host, port
        self._server = None
        self.codec = Codec()
        self._thread.start()
        try:
            self._call(self._start(api, max_message_bytes))
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise

    def _call(self, coroutine, timeout: float = timeouts.SERVE_GRPC_START_SECS):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _start(self, api: ServingApi, max_message_bytes: int) -> None:
        self._server = grpc.aio.server(maximum_concurrent_rpcs=MAX_RPCS, options=[
            ("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes), *CONNECTION_OPTIONS])
        add_services(self._server, api, self.codec)
        try:
            bound = self._server.add_insecure_port(self._address)
        except RuntimeError:
            bound = 0
        if not bound:
            raise UsageError(ERR_BIND.format(port=self._port, host=self._host))
        await self._server.start()

    def stop(self, grace: float) -> concurrent.futures.Future:
        """New RPCs are refused at once (UNAVAILABLE); those in flight get `grace` seconds. Done when stopped."""
        return asyncio.run_coroutine_threadsafe(self._server.stop(grace), self._loop)

    def close(self, timeout: float = timeouts.SERVE_CLOSE_SECS) -> None:
        """Stops the server and its loop, within `timeout` in all."""
        end = time.monotonic() + timeout
        try:
            self._call(self._server.stop(None), timeout=timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self.codec.close()
        self._thread.join(max(end - time.monotonic(), 0.0))
