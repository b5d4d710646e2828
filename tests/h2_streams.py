"""HTTP/2 as a gRPC client speaks it, on a plain socket (RFC 9113, HPACK of RFC 7541 without its tables), for
the tests that must see what grpcio's own client hides: the server's SETTINGS, and which streams it refuses.
A grpcio client keeps its requests beyond the server's SETTINGS_MAX_CONCURRENT_STREAMS waiting in the client,
so only a client that does not can show what the server does with them."""

from __future__ import annotations

import socket
import struct
import time
from typing import Dict, List, Optional

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x7
END_HEADERS, ACK = 0x4, 0x1
MAX_CONCURRENT_STREAMS = 0x3  # the SETTINGS parameter
REFUSED_STREAM = 0x7  # RST_STREAM's error code for a stream the server did not process


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _literal(name: str, value: str) -> bytes:
    """HPACK's literal header field without indexing, a new name, no Huffman (names and values under 127 bytes)."""
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


def request_headers(path: str) -> bytes:
    """A gRPC request's header block (no grpc-timeout: the server sets no deadline of its own for it)."""
    return b"".join(_literal(name, value) for name, value in (
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
        ("content-type", "application/grpc"), ("te", "trailers")))


class Connection:
    """One HTTP/2 connection to a gRPC server: its SETTINGS read and acknowledged on opening."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.sendall(PREFACE + _frame(SETTINGS, 0, 0))
        self.settings: Dict[int, int] = {}
        self._buffer = b""
        kind, flags, _, payload = self.read_frame()
        assert kind == SETTINGS and not flags & ACK, (kind, flags)
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack(">HI", payload[offset:offset + 6])
            self.settings[key] = value
        self.sock.sendall(_frame(SETTINGS, ACK, 0))

    def read_frame(self):
        """(type, flags, stream id, payload) of the next frame."""
        while True:
            if len(self._buffer) >= 9:
                length = int.from_bytes(self._buffer[:3], "big")
                if len(self._buffer) >= 9 + length:
                    kind, flags = self._buffer[3], self._buffer[4]
                    stream = struct.unpack(">I", self._buffer[5:9])[0] & 0x7FFFFFFF
                    payload, self._buffer = self._buffer[9:9 + length], self._buffer[9 + length:]
                    return kind, flags, stream, payload
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            self._buffer += data

    def open_streams(self, path: str, count: int) -> List[int]:
        """`count` requests' headers at once, none of their messages: the stream ids (1, 3, 5, ...)."""
        block, streams = request_headers(path), [2 * index + 1 for index in range(count)]
        self.sock.sendall(b"".join(_frame(HEADERS, END_HEADERS, stream, block) for stream in streams))
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
                kind, _, stream, payload = self.read_frame()
            except socket.timeout:
                break
            if kind == RST_STREAM:
                resets[stream] = struct.unpack(">I", payload)[0]
            elif kind == GOAWAY:
                break
        return resets

    def close(self) -> None:
        self.sock.close()


def max_concurrent_streams(connection: Connection) -> Optional[int]:
    return connection.settings.get(MAX_CONCURRENT_STREAMS)
