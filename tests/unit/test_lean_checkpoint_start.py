"""train_and_evaluate in one process evaluates its first checkpoint, though a session start saves none
(tf_workarounds.lean_checkpoint_start): Estimator's evaluation listener skips its first save as the untrained
one, and without that save it skipped the first real checkpoint (one_device.yaml's step 250; a sweep trial's
first evaluation, which the median rule judges)."""

import tensorflow as tf

from estimator_mnist.tf_task.tf_workarounds import lean_checkpoint_start
from tests.unit.fakes import tiny_estimator


class EvaluatedSteps(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.steps = []

    def begin(self):
        self._step = tf.compat.v1.train.get_global_step()

    def end(self, session):
        self.steps.append(int(session.run(self._step)))


def test_every_checkpoint_is_evaluated_the_first_one_too(tmp_path, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)  # one process: Estimator's local train_and_evaluate
    lean_checkpoint_start()
    _, estimator, train_spec, eval_spec = tiny_estimator(tmp_path)  # 4 steps, a checkpoint every 2
    evaluated = EvaluatedSteps()
    eval_spec = tf.estimator.EvalSpec(eval_spec.input_fn, steps=1, throttle_secs=0, start_delay_secs=0,
                                      hooks=[evaluated])
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    assert evaluated.steps == [2, 4]
