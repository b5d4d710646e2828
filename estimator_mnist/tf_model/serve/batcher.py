"""Concurrent requests batched into model calls of at most `max_batch_size` images, as Serving's batching does
(with its large-batch splitting), fairly, with a bounded wait and a bounded queue.

Requests for the same version and signature whose inputs have the same
dtypes and per-example shapes share a model call of at most
`max_batch_size` examples; the first request of a call waits at most
`timeout_secs` for others. A larger request is split into chunks; the
clients take turns by deficit round robin, small requests first
(fair_queue.py), so a 1-image request waits for at most two calls
whatever the others send, and while small requests come each call holds
at most 16 images. A call that fails is run again request by request, so a
bad image fails only its own request (Serving would fail the whole batch).
Each version has its own thread (a lane) that runs its model: a session
already uses every core, and a call that hangs holds only its own lane.

Each lane holds at most `max_queued_images` images not yet answered, each
client at most `max_client_images` (fair_queue.py: QueueFull, ClientFull,
and TooLate for a request that could not be answered by its deadline). One
given up leaves the queue and drops its inputs at once. No TensorFlow.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from estimator_mnist.tf_model.serve.fair_queue import ClientFull, FairQueue, QueueFull, TooLate

__all__ = ["Batcher", "ClientFull", "give_up", "QueueFull", "Task", "TooLate"]

MAX_BATCH_SIZE = 64
TIMEOUT_SECS = 0.002
MAX_QUEUED_IMAGES = 20000  # per version: two requests of MNIST's whole test set; about 63 MB as float32
MAX_CLIENT_IMAGES = 10000  # per client and version: one such request


@dataclass(eq=False)  # compared by identity: `task in queue` must not compare arrays
class Task:
    version: object  # versions.Version, held by the caller until the future is done
    signature: str
    inputs: Dict[str, np.ndarray]
    client: str = ""  # its source address (serving_api.client_of)
    future: Future = field(default_factory=Future)
    given: int = 0  # examples handed to model calls so far
    pieces: List[Dict[str, np.ndarray]] = field(default_factory=list)  # the outputs of its chunks, in order

    def __post_init__(self):
        sizes = {len(array) if array.ndim else 0 for array in self.inputs.values()}
        # Its examples: the common first dimension of its inputs, or 0 (a scalar, or inputs that differ).
        self.size = sizes.pop() if len(sizes) == 1 else 0
        # What must match for tasks to share a model call; a task of no clear size runs alone, whole.
        self.key = (self.signature, tuple((name, array.dtype.str, array.shape[1:])
                                          for name, array in sorted(self.inputs.items()))) if self.size else (id(self),)

    @property
    def left(self) -> int:
        return max(self.size, 1) - self.given


Slice = Tuple[Task, int, int]  # a task's examples [start, stop) in one model call


def _split(outputs: Dict[str, np.ndarray], sizes: List[int]) -> List[Dict[str, np.ndarray]]:
    bounds = np.cumsum(sizes)[:-1]
    pieces = {name: np.split(array, bounds) for name, array in outputs.items()}
    return [{name: pieces[name][index] for name in outputs} for index in range(len(sizes))]


def _inputs(piece: Slice) -> Dict[str, np.ndarray]:
    task, start, stop = piece
    whole = not task.size or (start == 0 and stop == task.size)
    return task.inputs if whole else {name: array[start:stop] for name, array in task.inputs.items()}


def _joined(pieces: List[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """A request's outputs from those of its chunks."""
    return pieces[0] if len(pieces) == 1 else {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]}


def give_up(future: Future) -> None:
    """A request given up: cancelled, or failed if a chunk of it ran; it leaves the queue and drops its inputs."""
    if not future.cancel():
        _settle(future, error=CancelledError())


def _settle(future: Future, result=None, error: Optional[BaseException] = None) -> None:
    """A result or an error, unless the request was given up or failed meanwhile (abandon())."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass


class Lane:
    """One version's queue (tasks with examples not yet handed to a call, in turn) and its model thread."""

    def __init__(self, batcher: "Batcher", version):
        self.batcher, self.version = batcher, version
        self._cond = threading.Condition()
        self._queue = FairQueue(batcher)
        self._running: List[Task] = []  # the tasks of the call running now
        self._stopping = False
        self.thread = threading.Thread(target=self._loop, name=f"serve-batcher-{getattr(version, 'number', '')}",
                                       daemon=True)  # daemon: a call that never returns cannot keep the process up
        self.thread.start()

    def put(self, task: Task) -> None:
        with self._cond:
            if self._stopping:
                task.future.cancel()
                return
            self._queue.add(task)  # QueueFull, ClientFull
            self._cond.notify()
        task.future.add_done_callback(lambda future: self._discard(task))

    @property
    def queued_images(self) -> int:
        return self._queue.queued_images

    def check(self, client: str, images: int, remaining: Optional[float] = None) -> None:
        """QueueFull, ClientFull or TooLate now (fair_queue.py), before the request's inputs are made."""
        with self._cond:
            self._queue.check(client, images, remaining)

    def _discard(self, task: Task) -> None:
        """A task done or given up: out of the queue, its inputs dropped at once (a running call's examples
        are counted out when it returns)."""
        with self._cond:
            self._queue.drop(task)
            task.inputs = {}

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Ends the lane once its current call returns; False if that call is still running after `timeout`."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def abandon(self, error: BaseException) -> None:
        """Every task of the lane, queued or in the running call, fails with `error` now."""
        with self._cond:
            tasks = self._queue.tasks() + list(self._running)
        for task in tasks:
            _settle(task.future, error=error)

    def _batch(self) -> List[Slice]:
        """The first task's next chunk and those that fit with it, gathered for at most `timeout_secs`."""
        batch: List[Slice] = []
        with self._cond:
            self._cond.wait_for(lambda: self._queue or self._stopping)
            if self._stopping:
                return []
            first_key, limit = self._queue.first_key(), self._queue.call_images()
            size = self._queue.take(first_key, limit, batch)
            deadline = time.monotonic() + self.batcher.timeout_secs
            while batch and batch[0][0].size and size < limit and time.monotonic() < deadline:
                self._cond.wait(max(deadline - time.monotonic(), 0.0))
                if self._stopping:
                    break
                size += self._queue.take(first_key, limit - size, batch)
            self._running = [task for task, _, _ in batch]
        return batch

    def _loop(self) -> None:
        while not self._stopping:
            batch = self._batch()
            if batch:
                self._run(batch)
            with self._cond:
                self._running = []
        with self._cond:
            tasks = self._queue.clear()
        for task in tasks:
            task.future.cancel()

    def _call(self, signature: str, inputs: Dict[str, np.ndarray], examples: int):
        self.batcher.calls += 1
        self.batcher.on_batch(self.version, examples)
        started = time.monotonic()
        outputs = self.version.model.run(signature, inputs)
        with self._cond:
            self._queue.called(examples, time.monotonic() - started)
        return outputs

    def _run(self, batch: List[Slice]) -> None:
        given_up = [piece for piece in batch if piece[0].future.done()]  # while the call was gathered
        if given_up:
            with self._cond:
                for task, start, stop in given_up:
                    self._queue.answered(task, stop - start)  # handed to this call: counted until now
            batch = [piece for piece in batch if not piece[0].future.done()]
        if not batch:
            return
        first = batch[0][0]
        if len(batch) > 1:
            merged = {name: np.concatenate([_inputs(piece)[name] for piece in batch]) for name in first.inputs}
            try:
                outputs = self._call(first.signature, merged, sum(stop - start for _, start, stop in batch))
            except Exception:  # pylint: disable=broad-except  # some request of the batch is bad: find which
                outputs = None
            if outputs is not None:
                for piece, result in zip(batch, _split(outputs, [stop - start for _, start, stop in batch])):
                    self._done(piece, result)
                return
        for piece in batch:
            try:
                result = self._call(piece[0].signature, _inputs(piece), piece[2] - piece[1])
            except Exception as exc:  # pylint: disable=broad-except  # its own request's answer
                self._done(piece, None, exc)
            else:
                self._done(piece, result)

    def _done(self, piece: Slice, result, error: Optional[BaseException] = None) -> None:
        task, start, stop = piece
        with self._cond:
            self._queue.answered(task, stop - start)
            finished = error is not None or stop >= task.size
            if finished:
                self._queue.drop(task)
                task.inputs = {}
        if error is not None:
            _settle(task.future, error=error)
            return
        task.pieces.append(result)
        if finished:
            pieces, task.pieces = task.pieces, []
            _settle(task.future, _joined(pieces))


class Batcher:
    """The lanes of every loaded version. `on_batch(version, examples)` is told of each model call (metrics)."""

    def __init__(self, max_batch_size: int = MAX_BATCH_SIZE, timeout_secs: float = TIMEOUT_SECS,
                 on_batch: Callable[[object, int], None] = lambda version, examples: None,
                 max_queued_images: int = MAX_QUEUED_IMAGES, max_client_images: int = MAX_CLIENT_IMAGES):
        self.max_batch_size, self.timeout_secs, self.on_batch = max_batch_size, timeout_secs, on_batch
        self.max_queued_images, self.max_client_images = max_queued_images, max_client_images
        self._lanes: Dict[int, Lane] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self.clock: Callable[[], float] = time.monotonic  # when small requests came (fair_queue.py); tests set it
        self.calls = 0  # model calls so far (the tests read it)

    def _lane(self, version) -> Optional[Lane]:
        with self._lock:
            if self._stopped:
                return None
            return self._lanes.get(id(version)) or self._lanes.setdefault(id(version), Lane(self, version))

    def check(self, version, client: str, images: int, remaining: Optional[float] = None) -> None:
        """QueueFull, ClientFull or TooLate if a request of `images` from `client`, `remaining` seconds before
        its deadline, would be refused now: said before its inputs are made (submit() checks the bounds again)."""
        lane = self._lane(version)
        if lane is not None:
            lane.check(client, images, remaining)

    def submit(self, version, signature: str, inputs: Dict[str, np.ndarray], client: str = "") -> Future:
        """The request's future; QueueFull or ClientFull if there is no room for it."""
        task = Task(version, signature, inputs, client)
        lane = self._lane(version)
        if lane is None:
            task.future.cancel()
            return task.future
        lane.put(task)
        return task.future

    def queued_images(self) -> int:
        with self._lock:
            return sum(lane.queued_images for lane in self._lanes.values())

    def retire(self, version, timeout: Optional[float] = None) -> bool:
        """Stops `version`'s lane (its requests are done or given up); False if a call of it still runs."""
        with self._lock:
            lane = self._lanes.pop(id(version), None)
        return lane.stop(timeout) if lane is not None else True

    def abandon(self, error: BaseException) -> None:
        """Every request queued or running fails with `error` at once (the drain's end: answered, not reset)."""
        with self._lock:
            lanes = list(self._lanes.values())
        for lane in lanes:
            lane.abandon(error)

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stops every lane, all of them within `timeout` together."""
        with self._lock:
            self._stopped = True
            lanes, self._lanes = list(self._lanes.values()), {}
        end = None if timeout is None else time.monotonic() + timeout
        for lane in lanes:
            lane.stop(None if end is None else max(end - time.monotonic(), 0.0))
