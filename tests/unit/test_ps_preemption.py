"""A ps task's SIGTERM, on a real in-process ps server: it raises the trainers' stop counter (the variable their
own model_fn builds, found by its name), ends its serving loop when asked, and leaves once every trainer has
(fake probe, no sleeping). tests/e2e/test_preemption.py runs it with real trainers."""

import pytest
import tensorflow as tf

from estimator_mnist.tf_task.preemption import READS, Preemption, add_preemption_counter
from estimator_mnist.tf_task.ps_done import PsDoneWatcher, serve_until_done
from estimator_mnist.tf_task.ps_preemption import raise_stop_request, stop_with_the_trainers
from tests.helpers import free_ports

TRAINERS = [("chief:0", "localhost:1"), ("worker:0", "localhost:2")]


def _new_ps_server():
    [port] = free_ports(1)
    return tf.distribute.Server(tf.train.ClusterSpec({"ps": [f"localhost:{port}"]}), job_name="ps", task_index=0)


@pytest.fixture(scope="module")
def ps_server():
    return _new_ps_server()


def _trainers_counter(target: str, create: bool) -> float:
    """The counter as a trainer's graph builds it on the ps task: created (and initialised) or only read."""
    with tf.Graph().as_default():
        with tf.compat.v1.device("/job:ps/replica:0/task:0"):
            add_preemption_counter()
        [read] = tf.compat.v1.get_collection(READS)
        with tf.compat.v1.Session(target) as session:
            if create:
                session.run(tf.compat.v1.global_variables_initializer())
            return float(session.run(read))


def test_a_ps_task_raises_the_counter_the_trainers_built_and_leaves_once_they_have_all_left(ps_server):
    logged = []
    assert not raise_stop_request(ps_server.target, 1, logged.append)  # no trainer has built its graph yet
    assert _trainers_counter(ps_server.target, create=True) == 0.0
    exits, sleeps = [], []
    preemption = Preemption("ps:0", 60.0, graceful=True, exit_fn=lambda m, c: exits.append((m, c)))
    gone = iter([[], ["chief:0 (localhost:1)"], ["chief:0 (localhost:1)", "worker:0 (localhost:2)"]])
    stop_with_the_trainers(preemption, ps_server.target, 1, TRAINERS, logged.append,
                           probe=lambda peers: next(gone), sleep=sleeps.append)
    assert _trainers_counter(ps_server.target, create=False) == 1.0  # every trainer's next step sees it risen
    assert len(sleeps) == 2 and exits == [("task ps:0: SIGTERM, and every trainer has left; exiting with 200 "
                                           "(retryable)", 200)]
    assert logged == ["task ps:0: SIGTERM: serving the variables until chief:0, worker:0 have left",
                      "task ps:0: asked the trainers to stop at one step"]


def test_a_counter_the_trainers_create_after_the_sigterm_is_raised_once_it_is_there():
    server = _new_ps_server()  # one whose counter does not exist yet
    logged, exits = [], []
    preemption = Preemption("ps:0", 60.0, graceful=True, exit_fn=lambda m, c: exits.append((m, c)))
    sleeps = []

    def sleep(secs):  # the trainers create the counter while the ps task waits, at its first sleep
        sleeps.append(secs)
        if len(sleeps) == 1:
            _trainers_counter(server.target, create=True)

    gone = iter([[], [], ["chief:0 (localhost:1)", "worker:0 (localhost:2)"]])
    stop_with_the_trainers(preemption, server.target, 1, TRAINERS, logged.append, probe=lambda peers: next(gone),
                           sleep=sleep)
    assert _trainers_counter(server.target, create=False) == 1.0  # raised after the first sleep
    assert logged[-1] == "task ps:0: asked the trainers to stop at one step" and len(exits) == 1


def test_the_serving_loop_ends_when_a_stop_is_asked_and_not_before_every_report(ps_server):
    # Every trainer unreachable for 4 s ends a loop that ignored the stop with RetryableFailure, not a hang.
    watcher = PsDoneWatcher(["chief:0", "worker:0"], TRAINERS, idle_secs=4, final_secs=300,
                            probe=lambda peers, timeout: [f"{name} ({address})" for name, address in peers])
    asks = iter([False, True])
    assert serve_until_done(ps_server, 0, watcher, print, stop_asked=lambda: next(asks)) is False
    assert not watcher.done
