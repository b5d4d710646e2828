"""serve's drain: readiness, the requests in flight, and the moment new ones are refused, shared by REST and gRPC.

On SIGTERM (or Ctrl-C) the drain begins: readiness turns false at once
(`GET /estimator-mnist/ready` answers 503, the served version's status is
UNLOADING), requests are still answered for `delay_secs` while load
balancers notice, then new ones are refused (UNAVAILABLE: REST 503, and new
connections are no longer accepted), and those in flight are waited for,
at most `drain_secs`. No TensorFlow, no sockets: server.py drives it.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

ERR_STOPPING = "estimator-mnist serve is stopping (SIGTERM or Ctrl-C): send this request to another replica"


class Lifecycle:
    def __init__(self, delay_secs: float = 0.0, drain_secs: float = 0.0):
        self.delay_secs, self.drain_secs = delay_secs, drain_secs
        self._lock = threading.Condition()
        self._in_flight = 0
        self.drain_began: Optional[float] = None  # time.monotonic() of the signal
        self.refusing = False

    @property
    def draining(self) -> bool:
        return self.drain_began is not None

    @property
    def ready(self) -> bool:
        return not self.draining

    def begin_drain(self) -> None:
        with self._lock:
            if self.drain_began is None:
                self.drain_began = time.monotonic()

    def refuse(self) -> None:
        with self._lock:
            self.refusing = True

    def enter(self) -> bool:
        """A request begins; False if it must be refused (it is not counted then)."""
        with self._lock:
            if self.refusing:
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._lock.notify_all()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def wait_idle(self, timeout: float) -> bool:
        """True once no request is in flight; False if some still are after `timeout`."""
        with self._lock:
            return self._lock.wait_for(lambda: self._in_flight == 0, max(timeout, 0.0))
