"""Concurrent requests batched into one model call, as Serving's batching does, with a bounded wait.

Requests for the same version and signature whose inputs have the same
dtypes and per-example shapes are concatenated along the batch dimension,
up to `max_batch_size` examples; the first request of a batch waits at
most `timeout_secs` for others. A batch that fails is run again request by
request, so that a bad image fails only its own request (Serving would fail
the whole batch). One thread runs the model: a TensorFlow session already
uses every core for one call. No TensorFlow here: the call is
`version.model.run(signature, inputs)`.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Dict, List

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
        return (id(self.version), self.signature,
                tuple((name, array.dtype.str, array.shape[1:]) for name, array in sorted(self.inputs.items())))


def _split(outputs: Dict[str, np.ndarray], sizes: List[int]) -> List[Dict[str, np.ndarray]]:
    bounds = np.cumsum(sizes)[:-1]
    pieces = {name: np.split(array, bounds) for name, array in outputs.items()}
    return [{name: pieces[name][index] for name in outputs} for index in range(len(sizes))]


class Batcher:
    def __init__(self, max_batch_size: int = MAX_BATCH_SIZE, timeout_secs: float = TIMEOUT_SECS):
        self.max_batch_size, self.timeout_secs = max_batch_size, timeout_secs
        self._queue: "queue.Queue[Task]" = queue.Queue()
        self._waiting: List[Task] = []  # taken from the queue, left out of the last batch
        self._thread = threading.Thread(target=self._loop, name="serve-batcher", daemon=True)
        self._stopping = threading.Event()
        self.calls = 0  # model calls so far (the tests read it)

    def start(self) -> "Batcher":
        self._thread.start()
        return self

    def submit(self, version, signature: str, inputs: Dict[str, np.ndarray]) -> Future:
        task = Task(version, signature, inputs)
        self._queue.put(task)
        return task.future

    def stop(self) -> None:
        self._stopping.set()
        self._queue.put(None)
        self._thread.join()

    def _next(self, timeout: float):
        try:
            return self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None

    def _batch(self) -> List[Task]:
        """The first waiting task and those that fit with it, gathered for at most `timeout_secs`."""
        first = self._waiting.pop(0) if self._waiting else self._queue.get()
        if first is None:
            return []
        batch, size = [first], first.size
        deadline = time.monotonic() + self.timeout_secs
        for task in list(self._waiting):
            if task.key == first.key and size + task.size <= self.max_batch_size:
                self._waiting.remove(task)
                batch.append(task)
                size += task.size
        while size < self.max_batch_size:
            task = self._next(deadline - time.monotonic())
            if task is None:
                break
            if task.key == first.key and size + task.size <= self.max_batch_size:
                batch.append(task)
                size += task.size
            else:
                self._waiting.append(task)
        return batch

    def _loop(self) -> None:
        while not self._stopping.is_set():
            batch = self._batch()
            if batch:
                self._run(batch)
        for task in self._waiting + list(self._queue.queue):
            if task is not None:
                task.future.cancel()

    def _run(self, batch: List[Task]) -> None:
        first = batch[0]
        if len(batch) > 1:
            merged = {name: np.concatenate([task.inputs[name] for task in batch]) for name in first.inputs}
            try:
                self.calls += 1
                outputs = first.version.model.run(first.signature, merged)
            except Exception:  # pylint: disable=broad-except  # some request of the batch is bad: find which
                outputs = None
            if outputs is not None:
                for task, result in zip(batch, _split(outputs, [task.size for task in batch])):
                    task.future.set_result(result)
                return
        for task in batch:
            try:
                self.calls += 1
                task.future.set_result(task.version.model.run(task.signature, task.inputs))
            except Exception as exc:  # pylint: disable=broad-except  # its own request's answer
                task.future.set_exception(exc)
