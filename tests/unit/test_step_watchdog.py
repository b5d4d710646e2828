"""The step watchdog: one thread per trainer bounds a MultiWorkerMirrored step (step_watchdog.py)."""

from __future__ import annotations

import socket
import threading

from estimator_mnist.tf_task import runner
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.errors import RETRYABLE_EXIT_CODE
from estimator_mnist.tf_task.step_watchdog import StepWatchdogHook
from estimator_mnist.plan.task_plan import plan_task


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def watchdog(peers=(), timeout=10.0):
    exits, clock = [], Clock()
    hook = StepWatchdogHook("worker:0", timeout, list(peers), exit_fn=lambda m, c: exits.append((m, c)),
                            clock=clock, poll_secs=0.01)
    return hook, exits, clock


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_step_that_outlasts_the_timeout_ends_the_task_retryably():
    port = closed_port()
    hook, exits, clock = watchdog(peers=[("chief:0", f"127.0.0.1:{port}")])
    hook.before_run(None)
    clock.now += 10.0
    assert not hook.check() and not exits  # exactly the timeout: still within it
    clock.now += 0.5
    assert hook.check()
    [(message, code)] = exits
    assert code == RETRYABLE_EXIT_CODE
    assert message.startswith(f"task worker:0 lost chief:0 (127.0.0.1:{port}): a training step waited 10 s")
    assert "strategy.collective_timeout_secs=10" in message and "\n" not in message
    assert not hook.check()  # fires once


def test_a_peer_that_answers_but_takes_no_steps_is_reported_as_hung():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        hook, exits, clock = watchdog(peers=[("chief:0", "127.0.0.1:%d" % listener.getsockname()[1])])
        hook.before_run(None)
        clock.now += 11
        assert hook.check()
    assert "stopped taking steps (hung or stopped)" in exits[0][0]


def test_time_between_steps_does_not_count():
    """The final evaluation and the teardown come after the last step: no step is running then."""
    hook, exits, clock = watchdog()
    for _ in range(3):
        hook.before_run(None)
        clock.now += 9
        hook.after_run(None, None)
        clock.now += 1000
        assert not hook.check()
    assert exits == []


def test_the_watchdog_thread_fires_by_itself_and_stops_at_the_end():
    hook, exits, clock = watchdog()
    fired = threading.Event()
    hook._exit_fn = lambda m, c: (exits.append((m, c)), fired.set())
    hook.begin()
    hook.before_run(None)
    clock.now += 11
    assert fired.wait(5)
    quiet, _, _ = watchdog()
    quiet.begin()
    quiet.end(None)
    names = [t.name for t in threading.enumerate()]
    assert names.count("step-watchdog") <= 1  # the first one returned after firing, the second after end


def _hooks(strategy: dict):
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2"]}
    if strategy["name"] == "parameter_server":
        cluster["ps"] = ["localhost:3"]
    config = config_from_dict({"cluster": cluster, "strategy": strategy}, "t")
    return runner.training_hooks(config, plan_task(config, TaskId("worker", 0)))


def test_multi_worker_mirrored_trainers_get_one_watchdog_unless_the_timeout_is_off():
    assert sum(isinstance(h, StepWatchdogHook) for h in _hooks({"name": "multi_worker_mirrored"})) == 1
    assert not any(isinstance(h, StepWatchdogHook)
                   for h in _hooks({"name": "multi_worker_mirrored", "collective_timeout_secs": 0}))
    assert not any(isinstance(h, StepWatchdogHook) for h in _hooks({"name": "parameter_server"}))


def test_time_the_whole_process_spent_stopped_does_not_count():
    """scontrol suspend of the job: every process stopped, the watchdog's polls too; resumed, the step goes on."""
    hook, exits, clock = watchdog()
    hook.before_run(None)
    clock.now += 3
    assert not hook.check()
    clock.now += 600  # suspended, then resumed: the next poll comes 600 s late
    assert not hook.check() and not exits
    fired = []
    for _ in range(8):  # polled every second again: the step's own time passes the 10 s bound after 3 s + 7 s
        clock.now += 1
        fired.append(hook.check())
    assert fired == [False] * 6 + [True, False] and "waited 10 s" in exits[0][0], exits
