"""Which version is served: the newest export of the model path, polled and loaded live, as Serving's default
version policy (the latest version) does, with its status for `GET /v1/models/NAME`.

A version is an export's directory name (its timestamp). A newer one is
loaded beside the one being served, which is unloaded only once no request
uses it any more (Serving's availability-preserving policy). Loading is
injected (`load(export_dir)`), so this module needs no TensorFlow. An export
deleted while loaded does not matter: the loaded graph and its variables are
in memory; one deleted while it loads fails that load, which is recorded as
Serving records it, and the served version stays.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from estimator_mnist import checkpoints
from estimator_mnist.tf_model.predict import SAVED_MODEL_FILE, export_candidates

POLL_SECS = 1.0  # Serving's --file_system_poll_wait_seconds default
FIXED_VERSION = 1  # an export directory given itself, whose name is no number


def version_of(export_dir: str) -> int:
    name = Path(export_dir).name
    return int(name) if name.isdigit() else FIXED_VERSION


def newest_export(model_path: str) -> Optional[Tuple[int, str]]:
    """(version, directory) of the newest finished export that `model_path` names, if any."""
    candidates = export_candidates(model_path)
    return max(((version_of(d), d) for d in candidates), default=None)


def evaluation_of(export_dir: str) -> dict:
    """The global step and test accuracy of the evaluation that wrote this export (eval_results.jsonl of its
    model_dir, <model_dir>/export/<name>/<version>), or {} if none is recorded (yet)."""
    model_dir = Path(export_dir).parent.parent.parent
    wanted = os.path.realpath(export_dir)
    for record in reversed(checkpoints.read_eval_results(str(model_dir))):
        if record.get("export") and os.path.realpath(record["export"]) == wanted:
            return {"global_step": record.get("global_step"), "accuracy": record.get("accuracy")}
    return {}


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

    def unload(self) -> None:
        """Waits for the requests that use it, then frees it."""
        with self.lock:
            self.lock.wait_for(lambda: self.users == 0)
        self.model.close()


class Versions:
    """The served version of one model path, and every version's state as Serving reports it."""

    def __init__(self, model_path: str, load: Callable[[str], object], log: Callable[[str], None] = print,
                 poll_secs: float = POLL_SECS):
        self._path, self._load, self._log, self._poll_secs = model_path, load, log, poll_secs
        self._lock = threading.Lock()
        self._served: Optional[Version] = None
        self._states: Dict[int, Tuple[str, str, str]] = {}  # version -> (state, error_code, error_message)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def fixed(self) -> bool:
        """An export directory itself: there is nothing newer to poll for."""
        return (Path(self._path) / SAVED_MODEL_FILE).is_file()

    def poll(self) -> None:
        """Loads the newest export if it is newer than the served one and has not failed to load before."""
        newest = newest_export(self._path)
        if newest is None:
            return
        number, export_dir = newest
        served = self._served
        if (served and number <= served.number) or self._states.get(number, ("",))[0] == "END":
            return
        self._states[number] = ("LOADING", "OK", "")
        try:
            model = self._load(export_dir)
        except Exception as exc:  # pylint: disable=broad-except  # any load failure: keep serving what is served
            self._states[number] = ("END", "UNKNOWN", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            self._log(f"version {number} ({export_dir}) failed to load: {self._states[number][2]}")
            return
        with self._lock:
            old, self._served = self._served, Version(number, export_dir, model)
            self._states[number] = ("AVAILABLE", "OK", "")
        self._log(f"serving version {number} ({export_dir})")
        if old is not None:
            self._states[old.number] = ("UNLOADING", "OK", "")
            old.unload()
            self._states[old.number] = ("END", "OK", "")

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

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            served, self._served = self._served, None
        if served is not None:
            served.unload()
