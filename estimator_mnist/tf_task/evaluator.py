"""The evaluator: score each new checkpoint on the whole test set (and the validation split), export it, and record it.

Every evaluation goes to <model_dir>/eval_results.jsonl, the structured
record the launcher, the benchmarks and users read (model_files/checkpoints.py):
`accuracy` and `loss` are the test set's, and with a validation split
(data.validation_examples, splits.py) `validation_accuracy` and
`validation_loss` are that split's, for the same checkpoint; `time` is when
the test figures were in, and the evaluator task's records have `started`,
when it began on the checkpoint (the chief's progress record has the save's
times, save_times.py). TensorBoard
shows the test figures as `accuracy` and `loss` and the validation figures
as `validation_accuracy` and `validation_loss`, all under <model_dir>/eval.
"""

from __future__ import annotations

import json
import time

import tensorflow as tf

from estimator_mnist import storage
from estimator_mnist.model_files import checkpoints, layout
from estimator_mnist.config import Config
from estimator_mnist.tf_model.export import export_checkpoint, keep_newest
from estimator_mnist.tf_task.hooks import log
from estimator_mnist.tf_task.kept_evaluation import KeptEvaluation

# A checkpoint is noticed within this: TensorFlow's writes from other nodes or to a bucket give no inotify event,
# and a read of the small state file costs far less than a training step (docs/performance.md).
EVAL_POLL_SECS = 0.1
STARTED_KEY = "started"  # when the evaluation of a checkpoint began (evaluate_checkpoints), in eval_results.jsonl
VALIDATION_EVAL_NAME = "validation"  # Estimator also writes this evaluation's own events to <model_dir>/eval_validation
MSG_REMOVED = ("evaluation: {path} was removed by the chief's saver (training.keep_checkpoint_max: {count} newer "
               "checkpoints were saved) before it was {what}; the newest checkpoint is next")
MSG_BEST_BY_TEST = ("evaluation.export: best picks the checkpoint with the lowest TEST loss: there is no validation "
                    "split (data.validation_examples is 0), so the exported model's test figures are optimistic")


def removed_by_rotation(checkpoint_path: str) -> bool:
    """Whether the chief's saver deleted the checkpoint (keep_checkpoint_max) after the evaluator chose it: the state
    names a newer one and its index file is absent for sure. Any other failure to read it is no absence
    (checkpoints.confirmed_absent raises what the storage raised)."""
    step, newest = checkpoints.step_of(checkpoint_path), checkpoints.latest_step(storage.parent(checkpoint_path))
    return step is not None and newest is not None and newest > step and \
        checkpoints.confirmed_absent(checkpoint_path + layout.INDEX_SUFFIX)


def unless_removed(work, checkpoint_path: str, final: bool, what: str):
    """work(), or None when it failed because the checkpoint was rotated away under it. An evaluator that scores
    a checkpoint slower than the chief saves keep_checkpoint_max newer ones (SCHED_IDLE beside two trainers on 2
    busy cores: 7.6 s against one save every 2.6 s in a Slurm e2e run, Xeon) found it gone at its export and died
    with TF 2.15's "ValueError: The passed save_path is not a valid checkpoint". The final checkpoint is never
    rotated away: failing to read it stays an error. Pinned by tests/unit/test_evaluator.py."""
    try:
        return work()
    except (ValueError, tf.errors.OpError):
        if final or not removed_by_rotation(checkpoint_path):
            raise
        step = checkpoints.step_of(checkpoint_path)
        count = sum(1 for s in checkpoints.listed_steps(storage.parent(checkpoint_path)) or [] if s > step)
        log(MSG_REMOVED.format(path=checkpoint_path, count=count, what=what))
        return None


def write_validation_summary(eval_dir: str, step: int, figures: dict) -> None:
    """The validation figures as tags of their own beside Estimator's test `accuracy` and `loss` in <model_dir>/eval.

    FileWriterCache hands out the writer Estimator's own evaluation summaries use, so both land in one events file.
    Estimator calls it inside a graph; the evaluator task's loop runs eagerly, where a v1 FileWriter is refused.
    """
    values = [tf.compat.v1.Summary.Value(tag=tag, simple_value=value) for tag, value in figures.items()]
    with tf.Graph().as_default():
        writer = tf.compat.v1.summary.FileWriterCache.get(eval_dir)
        writer.add_summary(tf.compat.v1.Summary(value=values), step)
        writer.flush()


class SavedModelExporter(tf.estimator.Exporter):
    """Exports evaluated checkpoints (export.py) and appends every evaluation to eval_results.jsonl.

    Exporters are the one place where Estimator hands over the evaluation
    result together with the checkpoint it came from, so each evaluated step
    can be read without parsing logs or event files. It is also where the
    validation split is scored, by a second evaluation of the same checkpoint
    (`validation_input_fn`), on both paths that evaluate: the evaluator task
    (evaluate_checkpoints) and the one-process job's train_and_evaluate.
    `best_only` exports only when the loss is lower than that of every earlier
    export of this model_dir (read back from eval_results.jsonl, so a restart
    keeps it): the validation loss when there is a split, else the test loss.
    """

    def __init__(self, name: str, model_config, results_path: str, exports_to_keep: int, best_only: bool,
                 export_fn=export_checkpoint, validation_input_fn=None, scorer=KeptEvaluation):
        self._name, self._model_config, self._results_path = name, model_config, results_path
        self._exports_to_keep, self._best_only, self._export_fn = exports_to_keep, best_only, export_fn
        self._validation_input_fn = validation_input_fn
        # The validation split's scorer, built at its first use and kept: scorer(estimator, input_fn, name).
        self._scorer, self._validation_scorer = scorer, None
        self._loss_key = "validation_loss" if validation_input_fn is not None else "loss"
        self._said_test = False

    @property
    def name(self):
        return self._name

    def _improves(self, loss: float) -> bool:
        if self._loss_key == "loss" and not self._said_test:
            log(MSG_BEST_BY_TEST)
            self._said_test = True
        exported = [r[self._loss_key] for r in checkpoints.read_eval_results(storage.parent(self._results_path))
                    if r.get("export") and r.get(self._loss_key) is not None]
        return not exported or loss < min(exported)

    def prepare(self, estimator) -> None:
        """Builds the validation split's scorer now (the evaluator task, before the first checkpoint is saved)."""
        if self._validation_input_fn is not None and self._validation_scorer is None:
            self._validation_scorer = self._scorer(estimator, self._validation_input_fn, VALIDATION_EVAL_NAME)

    def _validation(self, estimator, checkpoint_path: str, step: int) -> dict:
        """The validation split's figures for the checkpoint the test set was just scored on ({} without a split)."""
        if self._validation_input_fn is None:
            return {}
        self.prepare(estimator)
        result = self._validation_scorer.evaluate(checkpoint_path)
        figures = {"validation_accuracy": round(float(result["accuracy"]), 6),
                   "validation_loss": float(result["loss"])}
        write_validation_summary(estimator.eval_dir(), step, figures)
        return figures

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        # The test evaluation ends here; the validation one and the export after it are no part of the time to
        # accuracy, which stays what it was without a split.
        evaluated_at = time.time()
        step = int(eval_result[tf.compat.v1.GraphKeys.GLOBAL_STEP])
        loss = float(eval_result["loss"])
        validation = unless_removed(lambda: self._validation(estimator, checkpoint_path, step), checkpoint_path,
                                    is_the_final_export, "scored on the validation split")
        removed, validation = validation is None, validation or {}
        exported = None
        if not removed and (not self._best_only or self._improves(validation.get(self._loss_key, loss))):
            exported = unless_removed(lambda: self._export_fn(self._model_config, checkpoint_path, export_path),
                                      checkpoint_path, is_the_final_export, "exported")
            if exported is not None:
                keep_newest(export_path, self._exports_to_keep)
        record = {
            "global_step": step,
            # 9920 right of 10000 is 0.992, not float32's 0.99199998: a threshold test must see 0.992.
            "accuracy": round(float(eval_result["accuracy"]), 6),
            "loss": loss,
            **validation,
            "checkpoint": checkpoint_path,
            "export": exported,
            "final": bool(is_the_final_export),
            "time": evaluated_at,
        }
        if eval_result.get(STARTED_KEY) is not None:  # the evaluator task's; the one-process job leaves it out
            record[STARTED_KEY] = round(float(eval_result[STARTED_KEY]), 3)
        # One whole line at the end (O_APPEND on a disk; a generation-matched rewrite on a bucket), whatever
        # else appends: the storage layer's.
        storage.append_line(self._results_path, json.dumps(record))
        held_out = (f"validation_accuracy={validation['validation_accuracy']:.4f} "
                    f"validation_loss={validation['validation_loss']:.4f} " if validation else "")
        log(f"evaluation: global_step={step} test_accuracy={record['accuracy']:.4f} test_loss={loss:.4f} "
            f"{held_out}export={exported}")
        return exported


def exporter(config: Config, validation_input_fn=None) -> tf.estimator.Exporter:
    """The exporter of every evaluation; `validation_input_fn` scores the validation split too (when there is one)."""
    evaluation = config.evaluation
    return SavedModelExporter(evaluation.export, config.model,
                              layout.eval_results_file(config.model_dir),
                              evaluation.exports_to_keep, best_only=evaluation.export == "best",
                              validation_input_fn=validation_input_fn)


def evaluate_checkpoints(estimator: tf.estimator.Estimator, eval_spec: tf.estimator.EvalSpec, max_steps: int,
                         poll_secs: float = EVAL_POLL_SECS, scorer=KeptEvaluation) -> dict:
    """The evaluator task: scores and exports new checkpoints until the final one (step >= max_steps).

    Estimator's own evaluator loop sleeps a whole throttle_secs after each
    evaluation, so the final checkpoint could wait that long (10 s at the end
    of a 2-minute run was seen), and then it sleeps once more before it
    notices that training is over. Here throttle_secs only spaces out the
    intermediate evaluations: the final checkpoint is scored as soon as it is
    on disk, and the task returns right after its export. The evaluation graph
    and session are built before the first checkpoint and kept (kept_evaluation.py);
    start_delay_secs delays only evaluations, counted from the task's start, so a
    checkpoint saved later is scored as soon as it is noticed.
    """
    started = time.time()
    kept = scorer(estimator, eval_spec.input_fn, None, eval_spec.hooks)
    for export in eval_spec.exporters:
        if isinstance(export, SavedModelExporter):
            export.prepare(estimator)
    evaluated, last_start = None, float("-inf")
    try:
        while True:
            path = checkpoints.latest_checkpoint(estimator.model_dir)
            step = checkpoints.step_of(path)
            final = step is not None and step >= max_steps
            now = time.time()
            if path and path != evaluated and now - started >= eval_spec.start_delay_secs and \
                    (final or now - last_start >= eval_spec.throttle_secs):
                previous, last_start = last_start, now
                scores = unless_removed(lambda: kept.evaluate(path), path, final, "evaluated")
                evaluated = path
                if scores is None:
                    last_start = previous  # nothing was scored: the newest is not held back by the throttle
                    continue
                result = {**scores, STARTED_KEY: now}
                for export in eval_spec.exporters:
                    export.export(estimator, layout.export_base(estimator.model_dir, export.name), path, result,
                                  final)
                if final:
                    return result
            time.sleep(poll_secs)
    finally:
        kept.close()
