"""The `checkpoint` state file of a model_dir, read and written by the checkpoint repair through the storage layer.

TensorFlow's `get_checkpoint_state` answers None on ANY OpError: a permission denied or a storage that failed to
serve the file looked like "no state", and the state was rebuilt and rewritten (issue 54). Here the file is read
strictly (checkpoints.read_strict): a missing file is confirmed by a stat of the file itself, access refused
is permanent (exit 1, one line naming it), a storage that fails to serve it retryable (exit 200 after bounded
reads). Only bytes that were read whole and are no state (cut short, edited, naming no checkpoint) make it
rebuilt, and then from the checkpoints found by a listing and by the paths the damaged text still names, each
confirmed by a stat of its index file: a directory listing that lags (NFS) never drops the newest one. The
rebuilt state is written by the storage layer (an atomic replace on a disk, an upload on a bucket), naming each
checkpoint relative to model_dir as TensorFlow's Saver does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

from google.protobuf import text_format
from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState

from estimator_mnist import storage
from estimator_mnist.model_files import checkpoints, layout

MSG_STATE_UNREADABLE = ("the checkpoint state file {path} is unreadable ({problem}); rebuilt it from the checkpoint "
                        "files in {model_dir}")
NOT_A_STATE, NO_CHECKPOINT = "not a checkpoint state", "it names no checkpoint"
_INDEX = re.compile(r"-(\d+)\.index$")
_NAMED = re.compile(r'"(?P<path>[^"\n]*-\d+)"')
_PROBLEM_CHARS = 200


@dataclass(frozen=True)
class Listed:
    """What the state file says: `paths`, oldest first; `problem`: why it must be rebuilt (None: it is fine)."""

    paths: List[str]
    problem: Optional[str] = None


def parse(model_dir: str, text: str) -> List[str]:
    """The checkpoints a state file's text lists, oldest first, the newest last; ValueError when it is no state."""
    state = CheckpointState()
    try:
        text_format.Parse(text, state)
    except text_format.ParseError as exc:
        raise ValueError(f"{NOT_A_STATE}: {' '.join(str(exc).split())[:_PROBLEM_CHARS]}") from None
    if not state.model_checkpoint_path:
        raise ValueError(NO_CHECKPOINT)
    paths = [layout.in_model_dir(model_dir, p) for p in state.all_model_checkpoint_paths]
    newest = layout.in_model_dir(model_dir, state.model_checkpoint_path)
    return [p for p in paths if p != newest] + [newest]


def _step(prefix: str) -> int:
    return checkpoints.step_of(prefix) or 0


def on_storage(model_dir: str, named: List[str] = ()) -> List[str]:
    """The checkpoint prefixes in model_dir, oldest step first: those a listing shows by their index files, and
    those `named` (by a damaged state) whose index file a stat finds, for a listing that lags."""
    found = {layout.entry(model_dir, name[:-len(layout.INDEX_SUFFIX)])
             for name in storage.listdir(model_dir) if _INDEX.search(name)}
    found |= {path for path in named if path not in found and storage.exists(path + layout.INDEX_SUFFIX)}
    return sorted(found, key=_step)


def read_listed(model_dir: str, sleep) -> Listed:
    """The state file's checkpoints; for one that is there but no state, the checkpoints to rebuild it from."""
    text = checkpoints.read_strict(layout.state_file(model_dir), sleep=sleep)
    if text is None:
        return Listed([])  # truly absent, a stat says so: nothing to restore, nothing to rewrite
    try:
        return Listed(parse(model_dir, text))
    except ValueError as exc:
        named = [layout.in_model_dir(model_dir, m["path"]) for m in _NAMED.finditer(text)]
        return Listed(on_storage(model_dir, named), str(exc))


def state_text(model_dir: str, newest: str, paths: List[str]) -> str:
    def name(path: str) -> str:
        inside = storage.parent(path).rstrip("/") == model_dir.rstrip("/")
        return storage.basename(path) if inside else path

    state = CheckpointState(model_checkpoint_path=name(newest),
                            all_model_checkpoint_paths=[name(p) for p in paths if p != newest] + [name(newest)])
    return text_format.MessageToString(state)


def write_state(model_dir: str, newest: Optional[str], paths: List[str]) -> None:
    """Replaces the state file whole (removes it when no checkpoint is left)."""
    path = layout.state_file(model_dir)
    if newest is None:
        storage.remove(path, missing_ok=True)
    else:
        storage.write_atomic(path, state_text(model_dir, newest, paths))
