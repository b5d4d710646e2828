"""waitress for serve: its body limit the app's, an oversized body refused with Serving's error body before it is
read, connections closed after their answer once the drain refuses new requests, and the drain's steps.

waitress refuses a body of `max_request_body_size` bytes or more as soon
as its Content-Length is read (a chunked one once the bytes read reach it),
so it is given the limit plus one: a body of exactly the limit is read; a
larger one is refused with a
plain-text 413; its error task is given Serving's answer instead (400 and
`{"error": ...}`, as the app answers a body over the limit), and no "100
Continue" is sent for a request already refused, so that a client waiting
for it never sends the body. waitress has no graceful stop of its own:
`stop_accepting` closes the listening socket (new connections are refused
by the kernel), `idle` says when every accepted request has been answered
and written out, and `close` ends the rest.

Connections are bounded: CONNECTION_LIMIT open at once (polled with
poll(2), not select(2), whose FD_SETSIZE of 1024 would cap them), one idle
for SERVE_IDLE_CONNECTION_SECS closed (waitress' channel_timeout, looked at
every second), and one whose request has not fully arrived
SERVE_RECEIVE_SECS after its first byte closed (waitress has no such bound:
a client sending its head a byte at a time would hold its slot for ever).
"""

from __future__ import annotations

import socket
import time

from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.server import create_server
from waitress.task import ErrorTask, WSGITask
from waitress.utilities import RequestEntityTooLarge

from estimator_mnist.config import timeouts
from estimator_mnist.tf_model.serve.app import ERR_BODY_SIZE
from estimator_mnist.tf_model.serve.lifecycle import Lifecycle
from estimator_mnist.tf_model.serve.serving_errors import error_body

THREADS = 32  # waitress' request threads: each waits on the batcher, so they bound the concurrent requests
CONNECTION_LIMIT = 1000  # open at once (100 idle ones leave room); more wait in the listen backlog
BACKLOG = 128
SWEEP_SECS = 1.0  # how often requests still arriving are looked at (a rhythm, not a bound)


def _channel_class(lifecycle: Lifecycle, max_body_bytes: int):
    class Task(WSGITask):
        def build_response_header(self):
            if lifecycle.refusing:  # a keep-alive client must reconnect, to another replica
                self.set_close_on_finish()
            return super().build_response_header()

    class Error(ErrorTask):
        def execute(self):
            if not isinstance(self.request.error, RequestEntityTooLarge):
                super().execute()
                return
            body = error_body(ERR_BODY_SIZE.format(limit=max_body_bytes)).encode("utf-8")
            self.status = "400 Bad Request"
            self.response_headers.append(("Content-Type", "application/json"))
            self.set_close_on_finish()
            self.content_length = len(body)
            self.write(body)

    class Channel(HTTPChannel):
        task_class, error_task_class = Task, Error
        receiving_since = 0.0  # time.monotonic() of the first byte of the request being received

        def received(self, data):
            if self.request is None and data:
                self.receiving_since = time.monotonic()
            return super().received(data)

        def send_continue(self):
            if self.request is not None and self.request.error:
                return  # refused already: the body must not be sent
            super().send_continue()

    return Channel


class HttpServer:
    def __init__(self, app, sock: socket.socket, lifecycle: Lifecycle, max_body_bytes: int,
                 threads: int = THREADS, connection_limit: int = CONNECTION_LIMIT,
                 receive_secs: float = timeouts.SERVE_RECEIVE_SECS):
        self.server = create_server(app, sockets=[sock], threads=threads, connection_limit=connection_limit,
                                    max_request_body_size=max_body_bytes + 1, backlog=BACKLOG,
                                    clear_untrusted_proxy_headers=True, asyncore_use_poll=True,
                                    channel_timeout=int(timeouts.SERVE_IDLE_CONNECTION_SECS), cleanup_interval=1)
        self.receive_secs, self._swept = receive_secs, time.monotonic()
        self.server.channel_class = _channel_class(lifecycle, max_body_bytes)
        self._map = self.server._map  # pylint: disable=protected-access  # the one loop's map, which we drive

    def poll(self, timeout: float) -> None:
        """One turn of waitress' loop (server.run() is this, for ever)."""
        wasyncore.loop(timeout=timeout, map=self._map, use_poll=self.server.adj.asyncore_use_poll, count=1)
        now = time.monotonic()
        if now - self._swept >= SWEEP_SECS:
            self._swept = now
            for channel in self.channels():
                if channel.request is not None and not channel.requests and \
                        now - channel.receiving_since > self.receive_secs:
                    channel.close()  # its request has not arrived in time: unanswered, its slot freed

    def stop_accepting(self) -> None:
        """Closes the listening socket alone: its trigger and channels go on."""
        if self.server.accepting:
            self.server.accepting = False
            wasyncore.dispatcher.close(self.server)

    def channels(self):
        return [channel for channel in list(self._map.values()) if isinstance(channel, HTTPChannel)]

    def idle(self) -> bool:
        """Every request read has been answered and its answer written out."""
        return all(not channel.requests and not channel.total_outbufs_len for channel in self.channels())

    def close(self, timeout: float = timeouts.SERVE_CLOSE_SECS) -> None:
        self.stop_accepting()
        for channel in self.channels():
            channel.close()
        self.server.task_dispatcher.shutdown(cancel_pending=True, timeout=timeout)
        self.server.trigger.close()
