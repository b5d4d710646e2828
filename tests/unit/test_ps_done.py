"""How a ps task decides that the run is over, or that it waited long enough (fake clock, fake probe)."""

import pytest

from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.ps_done import PsDoneWatcher

TRAINERS = [("chief:0", "a:1"), ("worker:0", "b:1")]


class World:
    def __init__(self):
        self.now, self.reachable = 0.0, {"chief:0", "worker:0"}

    def clock(self):
        return self.now

    def probe(self, peers, timeout):
        return [name for name, _ in peers if name not in self.reachable]


def watcher(world, evaluator=True):
    expected = ["chief:0", "worker:0"] + (["evaluator:0"] if evaluator else [])
    return PsDoneWatcher(expected, TRAINERS, idle_secs=30, final_secs=60, clock=world.clock, probe=world.probe)


def test_done_once_every_trainer_and_the_evaluator_reported():
    w = watcher(World())
    for name in ("worker:0", "chief:0", "chief:0"):  # a restarted trainer may report twice
        w.heard(name)
        assert not w.done
    w.heard("evaluator:0")
    assert w.done


def test_no_evaluator_means_the_trainers_are_enough():
    w = watcher(World(), evaluator=False)
    w.heard("chief:0")
    w.heard("worker:0")
    assert w.done


def test_a_ps_nobody_reaches_gives_up_retryably():
    world = World()
    w = watcher(world)
    world.reachable = {"worker:0"}
    world.now = 100
    w.check()  # one trainer still answers
    world.reachable = set()
    world.now = 120
    w.check()  # unreachable for 20 s only
    world.now = 131
    with pytest.raises(RetryableFailure, match=r"no trainer reached this ps task for training\.ps_idle_timeout_secs="
                                               r"30 s \(chief:0, worker:0 unreachable\)"):
        w.check()


def test_finished_trainers_are_not_missed_but_a_silent_evaluator_is_permanent():
    world = World()
    w = watcher(world)
    w.heard("chief:0")
    w.heard("worker:0")
    world.reachable = set()  # they exited after reporting
    world.now = 59
    w.check()
    world.now = 61
    with pytest.raises(PermanentFailure, match=r"training finished but evaluator:0 did not report within "
                                               r"evaluation\.final_timeout_secs=60 s"):
        w.check()
