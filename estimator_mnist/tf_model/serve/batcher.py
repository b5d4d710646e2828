"""Concurrent requests batched into one model call, as Serving's batching does, with a bounded wait.

Requests for the same version and signature whose inputs have the same
dtypes and per-example shapes are concatenated along the batch dimension,
up to `max_batch_size` examples; the first request of a batch waits at
most `timeout_secs` for others. A batch that fails is run again request by
request, so that a bad image fails only its own request (Serving would fail
the whole batch). Each version has its own thread (a lane) that runs its
model: a TensorFlow session already uses every core for one call, and a
call that hangs holds only its own version's lane, so that a newer version
answers meanwhile. A request whose caller gave up (its deadline passed) is
cancelled and left out of any later call. No TensorFlow here: the call is
`version.model.run(signature, inputs)`.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np

MAX_BATCH_SIZE = 64
TIMEOUT_SECS = 0.002


@dataclass
class Task:
    version: object  # versions.Version, held by the caller until the future is done
    signature: str
    inputs: Dict[str, np.ndarray]
    future: Future = field(default_factory=Future)

    @property
    def size(self) -> int:
        """Its examples: the common first dimension of its inputs, or 0 (a scalar, or inputs that differ)."""
        sizes = {len(array) if array.ndim else 0 for array in self.inputs.values()}
        return sizes.pop() if len(sizes) == 1 else 0

    @property
    def key(self) -> tuple:
        """What must match for tasks to share a model call; a task of no clear size runs alone."""
        if not self.size:
            return (id(self),)
        return (self.signature, tuple((name, array.dtype.str, array.shape[1:]) for name, array in sorted(self.inputs.items())))


def _split(outputs: Dict[str, np.ndarray], sizes: List[int]) -> List[Dict[str, np.ndarray]]:
    bounds = np.cumsum(sizes)[:-1]
    pieces = {name: np.split(array, bounds) for name, array in outputs.items()}
    return [{name: pieces[name][index] for name in outputs} for index in range(len(sizes))]


class Lane:
    """One version's queue and the thread that runs its model calls."""

    def __init__(self, batcher: "Batcher", version):
        self.batcher, self.version = batcher, version
        self.queue: "queue.Queue[Optional[Task]]" = queue.Queue()
        self._waiting: List[Task] = []  # taken from the queue, left out of the last batch
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"serve-batcher-{getattr(version, 'number', '')}",
                                       daemon=True)  # daemon: a call that never returns cannot keep the process up
        self.thread.start()

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Ends the lane once its current call returns; False if that call is still running after `timeout`."""
        self._stopping.set()
        self.queue.put(None)
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _next(self, timeout: float):
        try:
            return self.queue.get(timeout=timeout) if timeout > 0 else self.queue.get_nowait()
        except queue.Empty:
            return None

    def _batch(self) -> List[Task]:
        """The first waiting task and those that fit with it, gathered for at most `timeout_secs`."""
        first = self._waiting.pop(0) if self._waiting else self.queue.get()
        if first is None:
            return []
        limit = self.batcher.max_batch_size
        batch, size = [first], first.size
        deadline = time.monotonic() + self.batcher.timeout_secs
        for task in list(self._waiting):
            if task.key == first.key and size + task.size <= limit:
                self._waiting.remove(task)
                batch.append(task)
                size += task.size
        while size < limit:
            task = self._next(deadline - time.monotonic())
            if task is None:
                break
            if task.key == first.key and size + task.size <= limit:
                batch.append(task)
                size += task.size
            else:
                self._waiting.append(task)
        return batch

    def _loop(self) -> None:
        while not self._stopping.is_set():
            batch = [task for task in self._batch() if task.future.set_running_or_notify_cancel()]
            if batch:
                self._run(batch)
        for task in self._waiting + list(self.queue.queue):
            if task is not None:
                task.future.cancel()

    def _call(self, signature: str, inputs: Dict[str, np.ndarray], examples: int):
        self.batcher.calls += 1
        self.batcher.on_batch(self.version, examples)
        return self.version.model.run(signature, inputs)

    def _run(self, batch: List[Task]) -> None:
        first = batch[0]
        if len(batch) > 1:
            merged = {name: np.concatenate([task.inputs[name] for task in batch]) for name in first.inputs}
            try:
                outputs = self._call(first.signature, merged, sum(task.size for task in batch))
            except Exception:  # pylint: disable=broad-except  # some request of the batch is bad: find which
                outputs = None
            if outputs is not None:
                for task, result in zip(batch, _split(outputs, [task.size for task in batch])):
                    task.future.set_result(result)
                return
        for task in batch:
            try:
                task.future.set_result(self._call(task.signature, task.inputs, task.size))
            except Exception as exc:  # pylint: disable=broad-except  # its own request's answer
                task.future.set_exception(exc)


class Batcher:
    """The lanes of every loaded version. `on_batch(version, examples)` is told of each model call (metrics)."""

    def __init__(self, max_batch_size: int = MAX_BATCH_SIZE, timeout_secs: float = TIMEOUT_SECS,
                 on_batch: Callable[[object, int], None] = lambda version, examples: None):
        self.max_batch_size, self.timeout_secs, self.on_batch = max_batch_size, timeout_secs, on_batch
        self._lanes: Dict[int, Lane] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self.calls = 0  # model calls so far (the tests read it)

    def start(self) -> "Batcher":
        return self

    def submit(self, version, signature: str, inputs: Dict[str, np.ndarray]) -> Future:
        task = Task(version, signature, inputs)
        with self._lock:
            if self._stopped:
                task.future.cancel()
                return task.future
            lane = self._lanes.get(id(version))
            if lane is None:
                lane = self._lanes[id(version)] = Lane(self, version)
            lane.queue.put(task)
        return task.future

    def retire(self, version, timeout: Optional[float] = None) -> bool:
        """Stops `version`'s lane (its requests are done or given up); False if a call of it still runs."""
        with self._lock:
            lane = self._lanes.pop(id(version), None)
        return lane.stop(timeout) if lane is not None else True

    def stop(self, timeout: Optional[float] = None) -> None:
        with self._lock:
            self._stopped = True
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            lane.stop(timeout)
