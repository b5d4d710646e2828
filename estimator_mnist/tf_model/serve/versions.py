"""Which version is served: the newest export of the model path, polled and loaded live, as Serving's default
version policy (the latest version) does, with its status for `GET /v1/models/NAME`.

A version is an export's directory name (its timestamp). A newer one is
loaded beside the one being served, which is unloaded, in a thread of its
own, once no request uses it any more (Serving's availability-preserving
policy) or `unload_wait_secs` have passed (the request deadline: a request
still holding it by then has been answered DEADLINE_EXCEEDED). Loading is
injected (`load(export_dir)`), so this module needs no TensorFlow. An export
deleted while loaded does not matter: the loaded graph and its variables are
in memory; one deleted while it loads fails that load, which is recorded as
Serving records it, and the served version stays.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from estimator_mnist import storage
from estimator_mnist.model_files import exports

POLL_SECS = 1.0  # Serving's --file_system_poll_wait_seconds default
ENDED_KEPT = 4  # versions unloaded or failed whose END state GET /v1/models/NAME still lists (the newest ones)
FIXED_VERSION = 1  # an export directory given itself, whose name is no number


def version_of(export_dir: str) -> int:
    name = storage.basename(export_dir)
    return int(name) if name.isdigit() else FIXED_VERSION


def newest_export(model_path: str) -> Optional[Tuple[int, str]]:
    """(version, directory) of the newest finished export that `model_path` names, if any: the one listing of the
    model path that serve makes (the place to point at another storage layer)."""
    candidates = exports.candidates(model_path)
    return max(((version_of(d), d) for d in candidates), default=None)




@dataclass
class Version:
    """One loaded export; `model` is what `load` returned (it has `close()`)."""

    number: int
    export_dir: str
    model: object
    users: int = 0
    lock: threading.Condition = field(default_factory=threading.Condition)

    def acquire(self) -> "Version":
        with self.lock:
            self.users += 1
        return self

    def release(self) -> None:
        with self.lock:
            self.users -= 1
            self.lock.notify_all()

    def unload(self, timeout: Optional[float] = None, retire: Callable[["Version", float], bool] = None) -> bool:
        """Waits at most `timeout` for the requests that use it, stops its model calls (`retire`), frees it;
        False if a request or a model call still held it when it was freed."""
        with self.lock:
            idle = self.lock.wait_for(lambda: self.users == 0, timeout)
        idle = (retire(self, 1.0) if retire else True) and idle
        self.model.close()  # closing the session cancels a call still running in it
        return idle


class Versions:
    """The served version of one model path, and every version's state as Serving reports it."""

    def __init__(self, model_path: str, load: Callable[[str], object], log: Callable[[str], None] = print,
                 poll_secs: float = POLL_SECS, unload_wait_secs: Optional[float] = None,
                 retire: Optional[Callable[[Version, float], bool]] = None):
        self._path, self._load, self._log, self._poll_secs = model_path, load, log, poll_secs
        self._unload_wait_secs, self._retire = unload_wait_secs, retire
        self._unloading: List[threading.Thread] = []
        self._lock = threading.Lock()
        self._served: Optional[Version] = None
        self._signatures: frozenset = frozenset()  # the signature names of the loaded versions
        self._failed: set = set()  # versions that failed to load: never tried again
        self._states: Dict[int, Tuple[str, str, str]] = {}  # version -> (state, error_code, error_message)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def fixed(self) -> bool:
        """An export directory itself: there is nothing newer to poll for."""
        return exports.is_export(self._path)

    def poll(self) -> None:
        """Loads the newest export if it is newer than the served one and has not failed to load before."""
        newest = newest_export(self._path)
        if newest is None:
            return
        number, export_dir = newest
        served = self._served
        if (served and number <= served.number) or number in self._failed:
            return
        self._states[number] = ("LOADING", "OK", "")
        try:
            model = self._load(export_dir)
        except Exception as exc:  # pylint: disable=broad-except  # any load failure: keep serving what is served
            self._failed.add(number)
            self._end(number, ("END", "UNKNOWN", str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            self._log(f"version {number} ({export_dir}) failed to load: {self._states[number][2]}")
            return
        with self._lock:
            old, self._served = self._served, Version(number, export_dir, model)
            self._signatures = self._signatures | frozenset(getattr(model, "signature_defs", {}))
            self._states[number] = ("AVAILABLE", "OK", "")
        self._log(f"serving version {number} ({export_dir})")
        if old is not None:  # in a thread of its own: a request that hangs on it cannot hold up later versions
            self._states[old.number] = ("UNLOADING", "OK", "")
            thread = threading.Thread(target=self._unload, args=(old, self._unload_wait_secs),
                                      name=f"serve-unload-{old.number}", daemon=True)
            self._unloading.append(thread)
            thread.start()

    def _unload(self, old: Version, wait_secs: Optional[float]) -> None:
        if not old.unload(wait_secs, self._retire):
            self._log(f"version {old.number} unloaded while a request or a model call still held it, after "
                      f"{wait_secs:g} s")
        with self._lock:
            served = self._served
            self._signatures = frozenset(getattr(served.model, "signature_defs", {})) if served else frozenset()
        self._end(old.number, ("END", "OK", ""))

    def _end(self, number: int, state: Tuple[str, str, str]) -> None:
        """A version ended; only the newest ENDED_KEPT ended ones stay listed, so the states stay bounded."""
        with self._lock:
            self._states[number] = state
            ended = sorted(n for n, s in self._states.items() if s[0] == "END")
            for old in ended[:-ENDED_KEPT]:
                del self._states[old]

    def signature_names(self) -> frozenset:
        """The signatures of the versions loaded now (for the metrics' labels)."""
        return self._signatures

    def acquire(self, number: Optional[int] = None) -> Optional[Version]:
        """The served version (or `number` if it is the served one), held until `release()`; None if there is none."""
        with self._lock:
            served = self._served
            if served is None or (number is not None and number != served.number):
                return None
            return served.acquire()

    def states(self, number: Optional[int] = None) -> List[Tuple[int, str, str, str]]:
        """(version, state, error_code, error_message) of every version seen, or of `number`."""
        states = [(n, *state) for n, state in dict(self._states).items()]
        return [s for s in states if number is None or s[0] == number]

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_secs):
            try:
                self.poll()
            except OSError as exc:  # the run's directory moved or went away: keep serving, look again
                self._log(f"cannot look for exports in {self._path}: {exc}")

    def start(self) -> None:
        """Polls in the background (for a model_dir or run; an export given itself is never replaced)."""
        if not self.fixed:
            self._thread = threading.Thread(target=self._watch, name="serve-versions", daemon=True)
            self._thread.start()

    def stop(self, wait_secs: Optional[float] = None) -> bool:
        """Stops polling and unloads every version, within `wait_secs` in all; False if the polling thread (in
        a load, or a listing that hangs) or an unload still ran then (daemon threads: they end with the process)."""
        end = None if wait_secs is None else time.monotonic() + wait_secs

        def left() -> Optional[float]:
            return None if end is None else max(end - time.monotonic(), 0.0)

        self._stop.set()
        if self._thread is not None:
            self._thread.join(left())
        with self._lock:
            served, self._served = self._served, None
        if served is not None:
            self._states[served.number] = ("UNLOADING", "OK", "")
            thread = threading.Thread(target=self._unload, args=(served, left()), name=f"serve-unload-{served.number}",
                                      daemon=True)
            self._unloading.append(thread)
            thread.start()
        for thread in self._unloading:
            thread.join(left())
        return not any(t.is_alive() for t in self._unloading + [self._thread] if t is not None)
