"""Small files that other processes read while they are written: atomic JSON writes and tolerant reads."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Optional


def write_text_atomic(path, text: str, durable: bool = False) -> Path:
    """Writes `text` so that a reader sees the old file or the new one, never half of one. `durable`: synced to
    disk before it replaces the old file (a record that must survive a crash of the machine).

    The temporary file's name is unique per call, not per process: two threads of one process may write the same
    file at once (the chief's preemption mark, written by whichever of two paths ends it first), and with a name
    per pid the second os.replace found the first one's temporary gone (FileNotFoundError, a real Slurm run in CI;
    pinned by tests/unit/test_files.py)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: its mode is 0600 whatever the umask, and the file must have the mode every other file of the
    # run has (the plan's umask). A random name opened exclusively is as unique, on every host of a shared disk.
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as stream:
            stream.write(text)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    return path


def write_json_atomic(path, record, indent: Optional[int] = None) -> Path:
    """Writes `record` as JSON, atomically (write_text_atomic)."""
    return write_text_atomic(path, json.dumps(record, indent=indent) + "\n")


def read_json(path) -> Optional[dict]:
    """The JSON object in `path`, or None when it is missing or unreadable."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
