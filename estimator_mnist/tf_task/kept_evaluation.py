"""One evaluation graph and session kept for the evaluator's whole run: each checkpoint costs its pass over the data.

`Estimator.evaluate` builds everything anew for every checkpoint: a graph,
the input pipeline, model_fn, a Saver, grappler's pass and a MonitoredSession.
On 2 cores that was most of an evaluation beside the trainers
(docs/performance.md, "An evaluator that answers at once"). Here Estimator's
own `_evaluate_build_graph` builds the graph once (the same model_fn in EVAL
mode, so the same metrics, the loss metric Estimator adds, and the scaffold
that restores the moving averages in the weights' place), the graph is
finalised, and one session runs it. Per checkpoint: the scaffold's Saver
restores the variables, its local init op re-initialises the metrics, the
input hooks re-initialise the dataset's iterator, the update op runs until
the split is exhausted, and the figures are written as Estimator writes them
(`_write_dict_to_summary`, the checkpoint path summary) to the same eval
directory. The result is the dict `Estimator.evaluate` returns.

TF 2.15 (tensorflow_estimator 2.15): `_evaluate_build_graph` and the summary
writers are private; tests/unit/test_kept_evaluation.py pins that the figures
equal `Estimator.evaluate`'s for the same checkpoint and that the graph does not grow.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow_estimator.python.estimator import estimator as estimator_lib

ERR_HOOKS = ("the evaluator's EvalSpec has hooks ({hooks}): the kept evaluation session runs only the input "
             "pipeline's own; use Estimator.evaluate for evaluation hooks")


class KeptEvaluation:
    """Scores checkpoints of `estimator` on `input_fn`'s split with one graph and one session (`close` ends it)."""

    def __init__(self, estimator: tf.estimator.Estimator, input_fn, name=None, hooks=()):
        if hooks:
            raise ValueError(ERR_HOOKS.format(hooks=", ".join(type(h).__name__ for h in hooks)))
        self._output_dir = estimator.eval_dir(name)
        self._graph = tf.Graph()
        with context.graph_mode(), self._graph.as_default():
            scaffold, self._update_op, self._eval_dict, self._input_hooks = \
                estimator._evaluate_build_graph(input_fn, [])  # pylint: disable=protected-access
            scaffold.finalize()
            for hook in self._input_hooks:
                hook.begin()
            self._saver, self._local_init_op = scaffold.saver, scaffold.local_init_op
        self._graph.finalize()  # nothing is added per checkpoint: the graph and its memory stay as they are
        self._session = tf.compat.v1.Session(graph=self._graph, config=estimator.config.session_config)

    def evaluate(self, checkpoint_path: str) -> dict:
        """The figures of `checkpoint_path` (accuracy, loss, global_step), as Estimator.evaluate returns them."""
        with context.graph_mode(), self._graph.as_default():
            self._saver.restore(self._session, checkpoint_path)
            self._session.run(self._local_init_op)  # the metrics' totals and counts back to zero
            for hook in self._input_hooks:
                hook.after_create_session(self._session, None)  # the dataset's iterator from the start
            while True:
                try:
                    self._session.run(self._update_op)
                except tf.errors.OutOfRangeError:
                    break
            results = self._session.run(self._eval_dict)
            step = results[tf.compat.v1.GraphKeys.GLOBAL_STEP]
            estimator_lib._write_dict_to_summary(self._output_dir, results, step)  # pylint: disable=protected-access
            estimator_lib._write_checkpoint_path_to_summary(  # pylint: disable=protected-access
                self._output_dir, checkpoint_path, step)
        return results

    def close(self) -> None:
        self._session.close()
