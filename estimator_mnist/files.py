"""Small files that other processes read while they are written: atomic JSON writes and tolerant reads."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional


def write_text_atomic(path, text: str) -> Path:
    """Writes `text` so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
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
