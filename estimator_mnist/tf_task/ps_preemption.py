"""A ps task asked to stop (SIGTERM) stays until the trainers have stopped, because they save from its variables.

Slurm signals every task of a job at once, and Kubernetes signals the pods of
a drained node, a ps task among them. A ps task that left at once took the
variables the trainers' stop step is agreed on and saved from: with every task
signalled, the worker held its node for the whole grace (25.1 s, loopback,
Xeon); with the ps task alone signalled, the trainers were still retrying
55 s later, and nothing saved the steps since the last checkpoint
(tests/e2e/test_preemption.py). So a ps task, on SIGTERM:
- raises the trainers' shared stop counter (preemption.py), which lives on a
  ps task: trainers that got no SIGTERM of their own stop at one step too,
  and the chief saves it;
- serves the variables until every trainer has left (its port closed), then
  exits: 0 if the run's final checkpoint is on disk, else 200;
- within training.preemption_grace_secs in all (the deadline that Preemption
  keeps for every task that stops gracefully).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence, Tuple

import tensorflow as tf

from estimator_mnist.config import timeouts
from estimator_mnist.plan.peers import missing_peers
from estimator_mnist.tf_task.preemption import COUNTER_NAME, Preemption
from estimator_mnist.tf_task.ps_done import only_ps

POLL_SECS = 0.5  # how often a ps task looks whether the trainers have left


def raise_stop_request(target: str, ps_count: int, log: Callable[[str], None],
                       timeout_ms: int = timeouts.PS_STOP_REQUEST_MS) -> bool:
    """Adds 1 to the trainers' stop counter on whichever ps task holds it; False where no ps task holds one yet
    (no trainer has built its graph: nothing to stop)."""
    for index in range(ps_count):
        with tf.Graph().as_default():
            # The trainers' resource variable, by its shared name on the ps task that holds it: a new handle to
            # the same state, never initialised here.
            with tf.compat.v1.device(f"/job:ps/replica:0/task:{index}"):
                handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name=COUNTER_NAME)
                # False, not an error (which TF would log), where the variable is not, or not yet.
                exists = tf.raw_ops.VarIsInitializedOp(resource=handle)
                add = tf.raw_ops.AssignAddVariableOp(resource=handle, value=tf.constant(1.0))
            try:
                with tf.compat.v1.Session(target, config=only_ps(index, timeout_ms)) as session:
                    if session.run(exists):
                        session.run(add)
                        return True
            except tf.errors.OpError as exc:
                log(f"ps:{index}: could not raise the trainers' stop request: {type(exc).__name__}")
    return False


def stop_with_the_trainers(preemption: Preemption, target: str, ps_count: int, trainers: Sequence[Tuple[str, str]],
                           log: Callable[[str], None], probe=missing_peers, sleep=time.sleep) -> None:
    """After this ps task's SIGTERM: asks the trainers to stop, then exits once every one of them has left.
    Preemption's own deadline ends the task if they have not within the grace."""
    log(f"task {preemption.task}: SIGTERM: serving the variables until "
        f"{', '.join(name for name, _ in trainers)} have left")
    raised, tries = False, 0
    while True:
        # Asked again until it is raised: trainers still building their session create the counter later.
        if not raised:
            raised = raise_stop_request(target, ps_count, log if tries == 0 else lambda _: None)
            tries += 1
            if raised:
                log(f"task {preemption.task}: asked the trainers to stop at one step")
        if len(probe(trainers)) >= len(trainers):
            break
        sleep(POLL_SECS)
    preemption.leave("SIGTERM, and every trainer has left")
