"""How a ps task learns that the run is over, from the cluster itself: no launcher, no shared files.

The classic between-graph pattern: each ps task holds a queue; every trainer
enqueues its name when it has finished training, and the evaluator enqueues
its own after the final evaluation. The ps task serves the variables until
it has heard from every one of them, then exits 0. A ps task that no trainer
has reached for training.ps_idle_timeout_secs exits 200 (retryable); one
whose trainers finished but whose evaluator never reported within
evaluation.final_timeout_secs exits 1.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, List, Sequence, Tuple

import tensorflow as tf

from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.plan.peers import missing_peers

QUEUE_NAME = "estimator_mnist_done"
DEQUEUE_TIMEOUT_MS = 2000


def _done_queue(ps_index: int):
    # Every process builds the same queue: the shared_name makes them one resource on the ps task.
    with tf.compat.v1.device(f"/job:ps/replica:0/task:{ps_index}"):
        return tf.queue.FIFOQueue(1000, [tf.string], shapes=[[]], shared_name=QUEUE_NAME, name="done_queue")


def only_ps(ps_index: int, timeout_ms: int = 0) -> tf.compat.v1.ConfigProto:
    # Without the filter the ps's master would wait for every task of the cluster, finished ones too.
    return tf.compat.v1.ConfigProto(device_filters=[f"/job:ps/replica:0/task:{ps_index}"],
                                    operation_timeout_in_ms=timeout_ms)


def signal_done(ps_addresses: Sequence[str], name: str, timeout_ms: int, log: Callable[[str], None]) -> None:
    """Tells every ps task that `name` (a trainer, or the evaluator) has finished."""
    for index, address in enumerate(ps_addresses):
        with tf.Graph().as_default():
            enqueue = _done_queue(index).enqueue(name)
            try:
                with tf.compat.v1.Session(f"grpc://{address}", config=only_ps(index, timeout_ms)) as session:
                    session.run(enqueue)
            except tf.errors.OpError as exc:
                log(f"{name}: could not tell ps:{index} ({address}) that it finished: {type(exc).__name__}; "
                    "that ps task ends by its own timeouts")


class PsDoneWatcher:
    """The ps side: who has reported, and whether the wait is still reasonable."""

    def __init__(self, expected: Iterable[str], trainers: List[Tuple[str, str]], idle_secs: float,
                 final_secs: float, clock=time.monotonic, probe=missing_peers):
        self.expected, self.seen = set(expected), set()
        self._trainers, self._idle_secs, self._final_secs = trainers, idle_secs, final_secs
        self._clock, self._probe = clock, probe
        self._last_contact = clock()
        self._trainers_done_at = None

    @property
    def done(self) -> bool:
        return self.expected <= self.seen

    def heard(self, name: str) -> None:
        self.seen.add(name)
        if self._trainers_done_at is None and all(n in self.seen for n, _ in self._trainers):
            self._trainers_done_at = self._clock()

    def check(self) -> None:
        """Raises when the ps task should give up waiting."""
        now = self._clock()
        if self._trainers_done_at is not None:
            if now - self._trainers_done_at > self._final_secs:
                raise PermanentFailure(f"training finished but {', '.join(sorted(self.expected - self.seen))} did "
                                       f"not report within evaluation.final_timeout_secs={self._final_secs:g} s")
            return
        waiting = [(n, a) for n, a in self._trainers if n not in self.seen]
        if len(self._probe(waiting, timeout=1.0)) < len(waiting):
            self._last_contact = now  # some trainer is still there
        elif now - self._last_contact > self._idle_secs:
            raise RetryableFailure(f"no trainer reached this ps task for training.ps_idle_timeout_secs="
                                   f"{self._idle_secs:g} s ({', '.join(n for n, _ in waiting)} unreachable)")


def serve_until_done(server, ps_index: int, watcher: PsDoneWatcher, log: Callable[[str], None],
                     check_every_secs: float = 5.0, stop_asked: Callable[[], bool] = lambda: False) -> bool:
    """Serves the variables (the server runs in the background) until every trainer and the evaluator reported
    (True), or until `stop_asked` (False: a SIGTERM, seen within DEQUEUE_TIMEOUT_MS)."""
    with tf.Graph().as_default():
        dequeue = _done_queue(ps_index).dequeue()
        with tf.compat.v1.Session(server.target, config=only_ps(ps_index)) as session:
            last_check = 0.0
            while not watcher.done:
                if stop_asked():
                    return False
                try:
                    name = session.run(dequeue, options=tf.compat.v1.RunOptions(timeout_in_ms=DEQUEUE_TIMEOUT_MS))
                    watcher.heard(name.decode())
                    log(f"ps:{ps_index}: {name.decode()} finished ({len(watcher.seen)} of {len(watcher.expected)})")
                except tf.errors.DeadlineExceededError:
                    pass
                if time.monotonic() - last_check >= check_every_secs:
                    last_check = time.monotonic()
                    watcher.check()
    return True
