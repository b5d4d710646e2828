"""A disk that fills while a task writes a checkpoint or an export: one line, earlier work intact. No TensorFlow.

Exit 1 (permanent), not 200: the job itself is what fills the disk, so a
restart would redo the steps since the last checkpoint and fail again at the
same save, and under Kubernetes' ExitCode policy it would do so for every
restart of the budget. A person must free space (or give model_dir more);
then the same command resumes from the newest checkpoint, which is intact:
TensorFlow writes a checkpoint's files under temporary names and lists it in
the `checkpoint` state file only once they are complete, and an export is
renamed into place only once written (export.py). What the failed write left
behind (TensorFlow's `*_temp` folders, an unlisted newer checkpoint, a `temp-`
export) is removed here, so that it holds no space.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from typing import Optional

from estimator_mnist import storage
from estimator_mnist.model_files import checkpoints, exports, layout
from estimator_mnist.errors import PermanentFailure

NO_SPACE_TEXTS = ("No space left on device", "Disk quota exceeded")
ERR_DISK_FULL = ("task {task}: no space left on device writing {what}{path}: it needs {needed} free there, "
                 "{free} MB are free; earlier checkpoints and exports are intact (newest checkpoint: {newest}); "
                 "free space on that file system or give model_dir more, then start the tasks again: they resume "
                 "from that checkpoint")
_PATH = re.compile(r"(/[^\s;]+)[;:] (?:" + "|".join(NO_SPACE_TEXTS) + ")")
_CHECKPOINT_STEP = re.compile(r"^model\.ckpt-(\d+)[._]")
_MB = 1 << 20


def is_disk_full(exc: BaseException) -> bool:
    """An OSError with ENOSPC or EDQUOT, or a TensorFlow error that says so (TF 2.15: ResourceExhaustedError)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(text in str(exc) for text in NO_SPACE_TEXTS)


def _size(path: str) -> int:
    """Bytes under a local path (a full disk is a local one's: a bucket's objects are not measured)."""
    if storage.is_bucket(path):
        return 0
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def checkpoint_bytes(prefix: Optional[str]) -> int:
    if not prefix:
        return 0
    name, where = storage.basename(prefix), storage.parent(prefix)
    return sum(_size(storage.join(where, n)) for n in storage.listdir(where) if n.startswith(name + "."))


def remove_partial_writes(model_dir: str) -> list:
    """Removes what an interrupted save or export left in model_dir: TensorFlow's `_temp` folders and files, and
    a checkpoint newer than every one the state file lists. A listed checkpoint (step 0 included) is never
    touched, and without a state file to tell which are complete, no checkpoint is."""
    listed = checkpoints.listed_steps(model_dir)
    removed = []
    for name in storage.listdir(model_dir):
        match = _CHECKPOINT_STEP.match(name)
        if not match:
            continue
        step = int(match.group(1))
        if "_temp" in name or (listed is not None and step not in listed and step > max(listed)):
            removed.append(layout.entry(model_dir, name))
    removed += exports.temporaries(model_dir)
    for path in removed:
        if storage.isdir(path):
            with contextlib.suppress(OSError):
                storage.rmtree(path)
        else:
            storage.remove(path, missing_ok=True)
    return removed


def _free_bytes(path: str) -> int:
    """Free bytes on the local file system that holds `path` (or would, for a path not made yet)."""
    where = path if os.path.isdir(path) else os.path.dirname(path)
    while where and not os.path.isdir(where):
        where = os.path.dirname(where)
    return shutil.disk_usage(where or ".").free


def disk_full_failure(task: str, model_dir: str, exc: BaseException) -> PermanentFailure:
    """The one-line failure for a full disk, after removing the partial files of the failed write."""
    match = _PATH.search(str(exc))
    path = match.group(1) if match else getattr(exc, "filename", None) or model_dir
    export = os.sep + layout.EXPORT_DIR + os.sep in path
    # TensorFlow names its temporary file (model.ckpt-20_temp/part-...tempstate123, export/latest/temp-17.../...):
    # the checkpoint's prefix and the export base are what the user knows.
    path = re.sub(r"_temp(/.*)?$", "", re.sub(r"/temp-\d+(/.*)?$", "", path))
    remove_partial_writes(model_dir)
    newest = checkpoints.latest_checkpoint(model_dir)
    finished = exports.in_model_dir(model_dir)
    needed = _size(finished[-1]) if export and finished else checkpoint_bytes(newest)
    free = _free_bytes(path if not storage.is_bucket(path) else ".")
    # The size of the last one written; before the first, only that it is more than what is free.
    needed_text = f"about {needed / _MB:.1f} MB" if needed else f"more than {free / _MB:.1f} MB"
    return PermanentFailure(ERR_DISK_FULL.format(
        task=task, path=path, what="an export in " if export else
        "the checkpoint " if os.path.basename(path).startswith("model.ckpt-") else "", needed=needed_text,
        free=f"{free / _MB:.1f}", newest=newest or "none"))
