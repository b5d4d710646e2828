"""The finished SavedModels under a gs:// path, listed through the storage layer (no TF): what `predict --model
gs://...` takes the newest of. TensorFlow then loads the export from the bucket itself (its gs:// file system).

A path names an export itself (it holds saved_model.pb), an export base (numbered exports below it), or a
model_dir (export bases under export/, as the evaluator writes them); a run directory is always local. As on a
disk (checkpoints.exports_in), only numbered names are finished exports: export.py writes each under a
temporary name and renames it (on a bucket TensorFlow's rename copies, then deletes, object by object, so a
numbered export counts once its saved_model.pb is there).
"""

from __future__ import annotations

from typing import List

from estimator_mnist import storage

SAVED_MODEL_FILE = "saved_model.pb"


def exports_in(export_base: str) -> List[str]:
    """The finished exports directly under `export_base`, oldest first."""
    stamps = sorted(int(name) for name in storage.listdir(export_base)
                    if name.isdigit() and storage.isfile(storage.join(export_base, name, SAVED_MODEL_FILE)))
    return [storage.join(export_base, str(stamp)) for stamp in stamps]


def candidates(path: str) -> List[str]:
    """Every finished export `path` names: itself, those of an export base, or those of a model_dir (its own
    or that of path/model)."""
    if storage.isfile(storage.join(path, SAVED_MODEL_FILE)):
        return [path]
    found = exports_in(path)
    for model_dir in (path, storage.join(path, "model")):
        export_dir = storage.join(model_dir, "export")
        found += [e for base in storage.listdir(export_dir) for e in exports_in(storage.join(export_dir, base))]
    return found
