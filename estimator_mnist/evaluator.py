"""The evaluator: score each new checkpoint on the whole test set, export it, and record the result.

Every evaluation goes to <model_dir>/eval_results.jsonl, the structured
record the launcher, the benchmarks and users read (checkpoints.py).
"""

from __future__ import annotations

import json
import os
import time

import tensorflow as tf

from . import checkpoints
from .config import Config
from .export import export_checkpoint, keep_newest
from .hooks import log

EVAL_POLL_SECS = 0.5


class SavedModelExporter(tf.estimator.Exporter):
    """Exports evaluated checkpoints (export.py) and appends every evaluation to eval_results.jsonl.

    Exporters are the one place where Estimator hands over the evaluation
    result together with the checkpoint it came from, so each evaluated step
    can be read without parsing logs or event files. `best_only` exports only
    when the evaluation loss is lower than that of every earlier export of
    this model_dir (read back from eval_results.jsonl, so a restart keeps it).
    """

    def __init__(self, name: str, model_config, results_path: str, exports_to_keep: int, best_only: bool,
                 export_fn=export_checkpoint):
        self._name, self._model_config, self._results_path = name, model_config, results_path
        self._exports_to_keep, self._best_only, self._export_fn = exports_to_keep, best_only, export_fn

    @property
    def name(self):
        return self._name

    def _improves(self, loss: float) -> bool:
        exported = [r["loss"] for r in checkpoints.read_eval_results(os.path.dirname(self._results_path))
                    if r.get("export")]
        return not exported or loss < min(exported)

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        # The evaluation ends here; the export after it takes seconds and is no part of the time to accuracy.
        evaluated_at = time.time()
        loss = float(eval_result["loss"])
        exported = None
        if not self._best_only or self._improves(loss):
            exported = self._export_fn(self._model_config, checkpoint_path, export_path)
            keep_newest(export_path, self._exports_to_keep)
        record = {
            "global_step": int(eval_result[tf.compat.v1.GraphKeys.GLOBAL_STEP]),
            # 9920 right of 10000 is 0.992, not float32's 0.99199998: a threshold test must see 0.992.
            "accuracy": round(float(eval_result["accuracy"]), 6),
            "loss": loss,
            "checkpoint": checkpoint_path,
            "export": exported,
            "final": bool(is_the_final_export),
            "time": evaluated_at,
        }
        with open(self._results_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        log(f"evaluation: global_step={record['global_step']} accuracy={record['accuracy']:.4f} "
            f"loss={record['loss']:.4f} export={exported}")
        return exported


def exporter(config: Config) -> tf.estimator.Exporter:
    evaluation = config.evaluation
    return SavedModelExporter(evaluation.export, config.model,
                              os.path.join(config.model_dir, checkpoints.EVAL_RESULTS_FILE),
                              evaluation.exports_to_keep, best_only=evaluation.export == "best")


def evaluate_checkpoints(estimator: tf.estimator.Estimator, eval_spec: tf.estimator.EvalSpec, max_steps: int,
                         poll_secs: float = EVAL_POLL_SECS) -> dict:
    """The evaluator task: scores and exports new checkpoints until the final one (step >= max_steps).

    Estimator's own evaluator loop sleeps a whole throttle_secs after each
    evaluation, so the final checkpoint could wait that long (10 s at the end
    of a 2-minute run was seen), and then it sleeps once more before it
    notices that training is over. Here throttle_secs only spaces out the
    intermediate evaluations: the final checkpoint is scored as soon as it is
    on disk, and the task returns right after its export.
    """
    time.sleep(eval_spec.start_delay_secs)
    evaluated, last_start = None, float("-inf")
    while True:
        path = checkpoints.latest_checkpoint(estimator.model_dir)
        step = checkpoints.step_of(path)
        final = step is not None and step >= max_steps
        if path and path != evaluated and (final or time.time() - last_start >= eval_spec.throttle_secs):
            last_start = time.time()
            result = estimator.evaluate(eval_spec.input_fn, steps=eval_spec.steps, checkpoint_path=path,
                                        hooks=eval_spec.hooks)
            for export in eval_spec.exporters:
                export.export(estimator, os.path.join(estimator.model_dir, "export", export.name), path, result, final)
            evaluated = path
            if final:
                return result
        time.sleep(poll_secs)
