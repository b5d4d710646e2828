"""A userspace stand-in for `tc qdisc add ... netem delay D loss P` between two simulated hosts.

`python -m tests.e2e.netem_link --a NS/TAP --b NS/TAP --delay-ms D --loss P --seed S --stats FILE`

The kernel the tests run on (6.18, no /lib/modules) has no sch_netem (tc says "Specified qdisc kind is
unknown"), nor iptables or nft, but it has TUN/TAP. So each simulated host gets a TAP device instead of
its end of a veth pair (simulated_hosts.py), and this process joins the two: it opens both TAPs (entering
each host's network namespace with setns(2) to find its device; an open TAP stays bound to its device
whatever namespace the process is in), reads each Ethernet frame from one and writes it to the other
after D milliseconds, dropping each frame with probability P from a seeded RNG, in both directions.
That is netem's `delay D loss P` without jitter or a rate: the delay is fixed, so each direction is one
FIFO queue ordered by release time. A frame written to a TAP whose link is down fails with EIO, and is
counted as dropped, as a pulled cable drops it.

It prints "ready" once both TAPs are open, then runs until SIGTERM (or its parent's death: it gets
PR_SET_PDEATHSIG), and on SIGTERM writes its counts as JSON to --stats: frames and bytes forwarded,
frames dropped by the loss draw and by a down link, per direction.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import fcntl
import json
import os
import random
import select
import signal
import struct
import sys
import time

from estimator_mnist.supervise.process_group import die_with_parent
from estimator_mnist.supervise.private_network import CLONE_NEWNET

TUNSETIFF = 0x400454CA  # _IOW('T', 202, int)
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000  # frames without the 4-byte packet-information header
MAX_FRAME = 65536 + 64  # the TAP's MTU (at most 65535) plus the Ethernet header
READS_PER_WAKEUP = 64  # frames taken from one TAP before the other gets its turn


def setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    with open(path, "rb") as handle:
        if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}: {os.strerror(ctypes.get_errno())}")


def open_tap(namespace: str, device: str) -> int:
    """A non-blocking descriptor of TAP `device` (made beforehand by `ip tuntap add`) in `namespace`."""
    setns(f"/run/netns/{namespace}")
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", device.encode(), IFF_TAP | IFF_NO_PI))
    return fd


class Direction:
    """One direction of the link: frames read from `source` wait `delay` seconds, then go to `target`."""

    def __init__(self, name: str, source: int, target: int, delay: float, loss: float, rng: random.Random):
        self.name, self.source, self.target = name, source, target
        self.delay, self.loss, self.rng = delay, loss, rng
        self.queue: collections.deque = collections.deque()  # (release time, frame), release times ascending
        self.counts = {"frames": 0, "bytes": 0, "lost": 0, "link_down": 0}

    def take(self, now: float) -> None:
        for _ in range(READS_PER_WAKEUP):
            try:
                frame = os.read(self.source, MAX_FRAME)
            except BlockingIOError:
                return
            if self.rng.random() < self.loss:
                self.counts["lost"] += 1
            else:
                self.queue.append((now + self.delay, frame))

    def release(self, now: float) -> None:
        while self.queue and self.queue[0][0] <= now:
            frame = self.queue.popleft()[1]
            try:
                os.write(self.target, frame)
                self.counts["frames"] += 1
                self.counts["bytes"] += len(frame)
            except OSError as exc:  # EIO: the target's link is down; EAGAIN: its queue is full. Both drop it.
                if exc.errno not in (errno.EIO, errno.EAGAIN):
                    raise
                self.counts["link_down" if exc.errno == errno.EIO else "lost"] += 1

    def next_release(self):
        return self.queue[0][0] if self.queue else None


def forward(directions, stop) -> None:
    """Moves frames until stop() is true."""
    sources = {d.source: d for d in directions}
    while not stop():
        now = time.monotonic()
        for direction in directions:
            direction.release(now)
        due = [t for t in (d.next_release() for d in directions) if t is not None]
        timeout = max(0.0, min(due) - time.monotonic()) if due else 0.5
        try:
            readable, _, _ = select.select(list(sources), [], [], timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for fd in readable:
            sources[fd].take(now)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.netem_link", description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="NAMESPACE/TAP of one host")
    parser.add_argument("--b", required=True, help="NAMESPACE/TAP of the other host")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay of every frame")
    parser.add_argument("--loss", type=float, default=0.0, help="probability that a frame is dropped")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stats", help="write the counts here (JSON) at SIGTERM")
    args = parser.parse_args(argv)
    die_with_parent()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the fixture ends it, not a Ctrl-C on the terminal
    fds = {}
    for side in ("a", "b"):
        namespace, device = getattr(args, side).split("/")
        fds[side] = open_tap(namespace, device)
    rng = random.Random(args.seed)
    delay = args.delay_ms / 1000.0
    directions = [Direction("a->b", fds["a"], fds["b"], delay, args.loss, rng),
                  Direction("b->a", fds["b"], fds["a"], delay, args.loss, rng)]
    print("ready", flush=True)
    forward(directions, lambda: bool(stopping))
    if args.stats:
        with open(args.stats, "w", encoding="utf-8") as handle:
            json.dump({d.name: d.counts for d in directions}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
