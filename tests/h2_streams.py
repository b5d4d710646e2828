"""A raw HTTP/2 client of a gRPC server, for the tests that must see what grpcio's own client hides: the server's
SETTINGS, and which streams it refuses. A grpcio client keeps its requests beyond the server's
SETTINGS_MAX_CONCURRENT_STREAMS waiting in the client, so only a client that does not can show what the server does
with them. The framing, HPACK and connection state are python-hyper's h2 (pinned in setup.cfg's dev extra)."""

from __future__ import annotations

import socket
import time
from typing import Dict, List, Optional

import h2.config
import h2.connection
import h2.events
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

REFUSED_STREAM = ErrorCodes.REFUSED_STREAM  # RST_STREAM's code (7) for a stream the server did not process


def request_headers(path: str):
    """A gRPC request's headers (no grpc-timeout: the server sets no deadline of its own for it)."""
    return [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
            ("content-type", "application/grpc"), ("te", "trailers")]


class Connection:
    """One HTTP/2 connection to a gRPC server: its SETTINGS read (and acknowledged, by h2) on opening."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.http2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.http2.initiate_connection()
        self._send()
        self.settings: Dict[int, int] = {}  # what the server's first SETTINGS announced
        while not self.settings:
            for event in self._receive():
                if isinstance(event, h2.events.RemoteSettingsChanged) and not self.settings:
                    self.settings = {int(code): change.new_value for code, change in event.changed_settings.items()}

    def _send(self) -> None:
        self.sock.sendall(self.http2.data_to_send())

    def _receive(self) -> List[h2.events.Event]:
        """The events of the next bytes the server sends; h2's answers to them (SETTINGS ACK, PING ACK) sent."""
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        events = self.http2.receive_data(data)
        self._send()
        return events

    def open_streams(self, path: str, count: int) -> List[int]:
        """`count` requests' headers at once, none of their messages: the stream ids (1, 3, 5, ...)."""
        # h2 (4.4.1) keeps a client to the peer's SETTINGS_MAX_CONCURRENT_STREAMS (send_headers raises
        # TooManyStreamsError past it), as grpcio does. These streams are meant to go past it, so h2's own copy of the server's limit
        # is raised to `count`: applied at once (acknowledge), it changes only h2's check, nothing sent.
        self.http2.remote_settings[SettingCodes.MAX_CONCURRENT_STREAMS] = count
        self.http2.remote_settings.acknowledge()
        streams = []
        for _ in range(count):
            stream = self.http2.get_next_available_stream_id()
            self.http2.send_headers(stream, request_headers(path))
            streams.append(stream)
        self._send()
        return streams

    def refused(self, wait_secs: float, expected: int) -> Dict[int, int]:
        """{stream id: error code} of every RST_STREAM the server sends within `wait_secs`, waiting no longer once
        it sent `expected` of them (then a moment more, so that a stream reset beyond those is seen too)."""
        resets: Dict[int, int] = {}
        end = time.monotonic() + wait_secs
        while time.monotonic() < end:
            if len(resets) == expected:
                end = min(end, time.monotonic() + 0.2)
            self.sock.settimeout(max(end - time.monotonic(), 0.01))
            try:
                events = self._receive()
            except socket.timeout:
                break
            for event in events:
                if isinstance(event, h2.events.StreamReset):
                    resets[event.stream_id] = event.error_code
            if any(isinstance(event, h2.events.ConnectionTerminated) for event in events):
                break
        return resets

    def close(self) -> None:
        self.sock.close()


def max_concurrent_streams(connection: Connection) -> Optional[int]:
    return connection.settings.get(SettingCodes.MAX_CONCURRENT_STREAMS)
