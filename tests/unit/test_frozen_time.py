"""Time a process spent stopped (a suspended Slurm job) is told from a poll that came a little late
(frozen_time.py)."""

from estimator_mnist.frozen_time import FROZEN_GAP_SECS, FrozenTime


def test_a_poll_far_later_than_due_is_time_spent_stopped():
    now = [0.0]
    frozen = FrozenTime(1.0, lambda: now[0])
    assert frozen.frozen() == 0.0  # the first poll: nothing to compare
    now[0] += 1.0 + FROZEN_GAP_SECS  # late, but within what a busy machine does
    assert frozen.frozen() == 0.0
    now[0] += 121.0  # stopped for two minutes
    assert frozen.frozen() == 120.0
    now[0] += 1.0
    assert frozen.frozen() == 0.0
