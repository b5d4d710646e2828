"""Measures a simulated link from inside a host's namespace: `python -m tests.e2e.link_probe serve|connect ...`.

`serve ADDRESS PORT` accepts connections for ever; from each it reads everything, then answers one byte.
`connect ADDRESS PORT --count N --bytes B` connects N times (each connect is one round trip: SYN, SYN-ACK),
then sends B bytes on one more connection and waits for the answer, and prints one JSON line:
{"connect_ms": [...], "send_secs": S} (null where a connect failed within --timeout).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time


def serve(address: str, port: int) -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(16)
        print("ready", flush=True)
        while True:
            connection, _ = listener.accept()
            with connection:
                while connection.recv(1 << 20):
                    pass
                connection.sendall(b"x")


def connect_ms(address: str, port: int, timeout: float):
    started = time.monotonic()
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return round((time.monotonic() - started) * 1000, 2)
    except OSError:
        return None


def send_secs(address: str, port: int, size: int, timeout: float):
    started = time.monotonic()
    try:
        with socket.create_connection((address, port), timeout=timeout) as connection:
            connection.sendall(bytes(size))
            connection.shutdown(socket.SHUT_WR)
            connection.recv(1)
    except OSError:
        return None
    return round(time.monotonic() - started, 4)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.link_probe")
    parser.add_argument("mode", choices=("serve", "connect"))
    parser.add_argument("address")
    parser.add_argument("port", type=int)
    parser.add_argument("--count", type=int, default=5)
    parser.add_argument("--bytes", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.mode == "serve":
        serve(args.address, args.port)
        return 0
    figures = {"connect_ms": [connect_ms(args.address, args.port, args.timeout) for _ in range(args.count)],
               "send_secs": send_secs(args.address, args.port, args.bytes, args.timeout) if args.bytes else None}
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
