"""The exports a path names, found by one route on a disk and a bucket alike: what `predict` takes the newest of,
what `serve` polls, what the evaluator keeps and a full disk's clean-up looks at. No TensorFlow, which then loads
the export from wherever it is (its own file systems, gs:// included).

A path names an export itself (it holds saved_model.pb), an export base (numbered exports below it, as an
ensemble's), a model_dir (export bases under export/, as the evaluator writes them), a run directory (its
model/, or the model_dir its run_summary.json names; a run directory is always local). Only numbered names are
finished exports: tf_model/export.py writes each under a temporary name and renames it (on a bucket, where a
rename copies then deletes object by object, saved_model.pb moves last, so a numbered export counts once its
saved_model.pb is there), as TensorFlow Serving expects.
"""

from __future__ import annotations

import os
from typing import List, Optional

from estimator_mnist import storage
from estimator_mnist.model_files import layout
from estimator_mnist.model_files.checkpoints import read_eval_results
from estimator_mnist.model_files.run_dir import summarised_model_dir


def is_export(path: str) -> bool:
    return storage.isfile(layout.saved_model_file(path))


def exports_in(base: str) -> List[str]:
    """The finished exports directly under an export base, oldest first."""
    stamps = sorted(int(name) for name in storage.listdir(base)
                    if name.isdigit() and is_export(layout.export_dir(base, int(name))))
    return [layout.export_dir(base, stamp) for stamp in stamps]


def bases(model_dir: str) -> List[str]:
    """The export bases of a model_dir (one per exporter: `latest`, `best`), by name."""
    root = layout.export_root(model_dir)
    return [storage.join(root, name) for name in storage.listdir(root)]


def in_model_dir(model_dir: str) -> List[str]:
    """Every finished export of a model_dir, base by base, each base's oldest first."""
    return [export for base in bases(model_dir) for export in exports_in(base)]


def temporaries(model_dir: str) -> List[str]:
    """The exports a stop left half-written (`temp-<timestamp>`, renamed when finished)."""
    return [storage.join(base, name) for base in bases(model_dir) for name in storage.listdir(base)
            if name.startswith(layout.TEMPORARY_EXPORT)]


def candidates(path: str) -> List[str]:
    """Every finished export that `path` names: the export itself, else those of an export base, of a model_dir,
    of a run directory's model/ and of the model_dir its run summary names. `serve` polls this for newer ones."""
    if is_export(path):
        return [path]
    found = exports_in(path) + in_model_dir(path) + in_model_dir(layout.default_model_dir(path))
    summarised = summarised_model_dir(path)
    return found + (in_model_dir(summarised) if summarised else [])


def version_of(export: str) -> Optional[int]:
    """An export's version (its timestamp), None for a directory whose name is no number."""
    name = storage.basename(export)
    return int(name) if name.isdigit() else None


def newest(path: str) -> Optional[str]:
    """The newest finished export `path` names, or None."""
    return max(candidates(path), key=lambda export: version_of(export) or 0, default=None)


def evaluation_of(export: str) -> dict:
    """The global step and test accuracy of the evaluation that wrote this export (the eval_results.jsonl of its
    model_dir, <model_dir>/export/<name>/<version>), or {} if none is recorded (yet)."""
    # A bucket's URL names one object prefix (realpath would mangle it); a local path may be a link.
    same = (lambda path: path == export) if storage.is_bucket(export) else \
        (lambda path, wanted=os.path.realpath(export): os.path.realpath(path) == wanted)
    for record in reversed(read_eval_results(layout.model_dir_of_export(export))):
        if record.get("export") and same(record["export"]):
            return {"global_step": record.get("global_step"), "accuracy": record.get("accuracy")}
    return {}
