"""One lane's queue (batcher.py): requests by client, taken into model calls by deficit round robin, bounded in
images per client and per version.

A client is a source address (serving_api.client_of). Each client has its
own queue; the clients with requests take turns (a ring). A model call of
at most `max_batch_size` images is filled in two passes: first the small
whole requests (at most SMALL_IMAGES) of every client, so a 1-image
request never waits behind another client's chunks, and a call with such a
request is kept to SMALL_CALL_IMAGES (the small request pays for a call of
16 images, not of 64), and so is every call while small requests come (one
came within SMALL_RECENT_SECS: call_images()), so that a small request
arriving waits for a running call of 16 images, not of 64 (on the Xeon
here: 3 ms against 10); then deficit round
robin (Shreedhar and Varghese, 1995): a client's turn adds a quantum of
`max_batch_size` images to its deficit (capped at one quantum: no credit
is saved up while idle), and its requests' images are taken while the
deficit lasts. With k clients busy, each gets about 1/k of the calls,
whatever the size of their requests.

Bounds, counted in images (what a request's shape declares), from a
request's arrival until its last image is answered: a client holding
`max_client_images` already is refused alone (ClientFull); the version's
queue holding `max_queued_images` refuses (QueueFull), except a client with
nothing queued, whose one request of at most `max_batch_size` images is
taken into a reserve of a tenth more, so that one busy client cannot shut
the others out. A request whose client's images ahead of it and its own
would take longer than its deadline leaves, even at the model's best pace,
is refused at once (TooLate): work that could only be given up half done
is never started (a flood of short-deadline requests costs no model time).
Called with the lane's lock held; no threads here.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, List, Optional

SMALL_IMAGES = 8  # a request of at most this many images goes into the next call whole, ahead of chunks
SMALL_CALL_IMAGES = 16  # a call with such a request in it holds at most this many images (chunks fill the rest)
# Calls hold at most SMALL_CALL_IMAGES while a small request came this recently: 16-image calls cost about a fifth
# more per image than 64-image ones, paid only while small requests wait (benchmarks/serve_abuse.py: a 1-image
# p99 beside a 10,000-image client 4.6x quiet with 64-image calls, 1.9x with 16).
SMALL_RECENT_SECS = 1.0
# The model's best pace: the fastest seconds per image of the last PACE_CALLS calls of at least SMALL_CALL_IMAGES
# images (a call of one image costs what one of 16 does, so it says nothing of the pace). The best, not the mean:
# a request is refused only when it could not be answered in time even if nothing else ran. Nothing is refused
# before PACE_MIN_CALLS such calls: a version's first call of each size pays TensorFlow's first run (3 ms of work
# took 0.1 s), and one such call alone as the pace refused every 10,000-image request (benchmarks/serve_abuse.py).
PACE_CALLS, PACE_MIN_CALLS = 32, 8


class QueueFull(Exception):
    """The version's queue holds `max_queued_images` images already."""


class ClientFull(Exception):
    """This client holds `max_client_images` queued images already."""


class TooLate(Exception):
    """The client's images ahead and this request's (`images`) would take `secs`, more than the `left` seconds
    its deadline leaves."""

    def __init__(self, images: int, secs: float, left: float):
        super().__init__(images, secs, left)
        self.images, self.secs, self.left = images, secs, left


class FairQueue:
    def __init__(self, limits):
        self.limits = limits  # max_queued_images, max_client_images, max_batch_size, clock (the Batcher's)
        self._queues: Dict[str, Deque] = {}  # client -> its tasks with images not handed to a call yet
        self._ring: Deque[str] = deque()  # the clients with such tasks, in turn
        self._deficit: Dict[str, int] = {}
        self._client_images: Dict[str, int] = {}  # client -> its images not answered yet
        self.queued_images = 0  # images of this lane's tasks not answered yet
        self._small_at = None  # limits.clock() when the last small request was added
        self._paces: Deque[float] = deque(maxlen=PACE_CALLS)  # seconds per image of recent large calls

    def __bool__(self) -> bool:
        return bool(self._ring)

    def first_key(self):
        return self._queues[self._ring[0]][0].key

    def tasks(self) -> List:
        return [task for queue in self._queues.values() for task in queue]

    def client_images(self, client: str) -> int:
        return self._client_images.get(client, 0)

    def called(self, images: int, secs: float) -> None:
        """A model call of `images` images took `secs`: the pace it shows."""
        if images >= SMALL_CALL_IMAGES:
            self._paces.append(secs / images)

    def check(self, client: str, images: int, remaining: Optional[float] = None) -> None:
        """ClientFull or QueueFull if `images` more of `client` would pass a bound; TooLate if they and the
        client's images ahead of them need more than `remaining` seconds at the model's best pace."""
        mine, most = self._client_images.get(client, 0), self.limits.max_queued_images
        if remaining is not None and len(self._paces) >= PACE_MIN_CALLS:
            needed = (mine + images) * min(self._paces)
            if needed > remaining:
                raise TooLate(mine + images, needed, remaining)
        if mine and mine + images > self.limits.max_client_images:
            raise ClientFull()
        if self.queued_images and self.queued_images + images > most:
            if mine or images > self.limits.max_batch_size or self.queued_images + images > most + most // 10:
                raise QueueFull()

    def call_images(self) -> int:
        """The most images of the next call: SMALL_CALL_IMAGES while small requests come, else max_batch_size."""
        most = self.limits.max_batch_size
        if self._small_at is not None and self.limits.clock() - self._small_at < SMALL_RECENT_SECS:
            return min(most, SMALL_CALL_IMAGES)
        return most

    def add(self, task) -> None:
        self.check(task.client, task.left)
        if 0 < task.size <= SMALL_IMAGES:
            self._small_at = self.limits.clock()
        self._count(task.client, task.left)
        if task.client not in self._queues:
            self._queues[task.client] = deque()
            self._ring.append(task.client)
        self._queues[task.client].append(task)

    def _count(self, client: str, images: int) -> None:
        self.queued_images += images
        left = self._client_images.get(client, 0) + images
        if left > 0:
            self._client_images[client] = left
        else:
            self._client_images.pop(client, None)

    def answered(self, task, images: int) -> None:
        """`images` of `task` answered (a chunk's call returned): no longer counted."""
        self._count(task.client, -images)

    def drop(self, task) -> None:
        """Out of the queue, its images not handed to a call no longer counted."""
        self._unqueue(task)
        self._count(task.client, -task.left)
        task.given = max(task.size, 1)

    def _unqueue(self, task) -> None:
        queue = self._queues.get(task.client)
        if queue is None or task not in queue:
            return
        queue.remove(task)
        if not queue:
            del self._queues[task.client]
            self._ring.remove(task.client)
            self._deficit.pop(task.client, None)

    def clear(self) -> List:
        tasks = self.tasks()
        self._queues, self._ring, self._deficit = {}, deque(), {}
        return tasks

    def _give(self, task, count: int, batch: List) -> None:
        batch.append((task, task.given, task.given + count))
        task.given += count
        self._deficit[task.client] = self._deficit.get(task.client, 0) - count
        if not task.left:
            self._unqueue(task)

    def take(self, key, room: int, batch: List) -> int:
        """Up to `room` images of the tasks that share `key` into `batch`: small whole requests of every client
        first, then deficit round robin."""
        taken, before = 0, sum(stop - start for _, start, stop in batch)
        for client in list(self._ring):
            for task in list(self._queues.get(client, ())):
                if taken >= room:
                    return taken
                if task.key == key and task.given == 0 and 0 < task.size <= min(SMALL_IMAGES, room - taken) \
                        and self._start(task):
                    self._give(task, task.size, batch)
                    taken += task.size
        if any(start == 0 and stop == task.size <= SMALL_IMAGES for task, start, stop in batch):
            room = min(room, max(SMALL_CALL_IMAGES - before, taken))
        progress = True
        while taken < room and self._ring and progress:
            progress = False
            for _ in range(len(self._ring)):
                if taken >= room or not self._ring:
                    break
                client = self._ring[0]
                quantum = self.limits.max_batch_size
                self._deficit[client] = min(self._deficit.get(client, 0) + quantum, quantum)
                got = self._turn(client, key, room - taken, batch)
                taken, progress = taken + got, progress or got > 0
                if self._ring and self._ring[0] == client:
                    self._ring.rotate(-1)
        return taken

    def _turn(self, client: str, key, room: int, batch: List) -> int:
        """One client's turn: its tasks of `key`, oldest first, while its deficit and the room last."""
        taken = 0
        for task in list(self._queues.get(client, ())):
            deficit = self._deficit.get(client, 0)
            if taken >= room or deficit <= 0:
                break
            if task.key != key or (batch and task.size == 0) or not self._start(task):
                continue
            count = min(task.left, room - taken, deficit) if task.size else 1
            self._give(task, count, batch)
            taken += count
            if task.left:
                break  # its next chunk on its next turn
        return taken

    def _start(self, task) -> bool:
        """False (and the task dropped) if it was given up just now: its done callback waits for the lock."""
        if task.future.done() or (task.given == 0 and not task.future.set_running_or_notify_cancel()):
            self.drop(task)
            return False
        return True
