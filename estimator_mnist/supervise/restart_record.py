"""The restart budget's record in model_dir, written with a last good copy beside it. No TensorFlow.

`restart_budget.json` holds a job's count (restart_budget.py); `restart_budget.json.last-good` is a copy of
the last record written whole. Each is written to a temporary file and renamed into place, the record first,
so at any moment both are whole files. A record that cannot be read or parsed (a torn NFS write, a disk
error, an edit by hand) is named in one line and kept aside, bytes unchanged, as
`restart_budget.json.unreadable-<time>`; the count goes on from the last good copy. If that one is unreadable
too, the count is lost, and the job fails closed: every task exits 1 with one line saying how to reset the
budget on purpose. The count never silently starts again from zero.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable, Optional

from estimator_mnist.errors import PermanentFailure
from estimator_mnist.storage import write_atomic

RECORD_FILE = "restart_budget.json"
LAST_GOOD = ".last-good"
MSG_KEPT_ASIDE = ("the restart budget's record {path} is unreadable ({problem}); its bytes are kept as {aside}; "
                  "the count goes on from its last good copy {good}")
ERR_BOTH = ("the restart budget's record {path} is unreadable ({problem}) and so is its last good copy {good} "
            "({good_problem}): the job's count of restarts is lost, so this task exits 1 rather than restart without "
            "one; to give the job a fresh budget on purpose, delete both files, then start the job again")
_FIELDS = {"job": str, "starts": int, "incidents": list}


def _parse(path: str) -> dict:
    """The record at `path`; OSError (FileNotFoundError included) or ValueError for one that is not."""
    with open(path, encoding="utf-8") as handle:
        record = json.load(handle)
    if not isinstance(record, dict):
        raise ValueError(f"a JSON {type(record).__name__}, not a record")
    for key, kind in _FIELDS.items():
        if not isinstance(record.get(key), kind):
            raise ValueError(f"its {key!r} is {record.get(key)!r}, not a {kind.__name__}")
    return record


def _problem(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return " ".join(text.split())[:160] or type(exc).__name__


def read_record(path: str, log: Callable[[str], None], clock=time.time) -> dict:
    """The record at `path` (empty when the job has none yet), else its last good copy; PermanentFailure
    when neither can be read. An unreadable record is renamed aside by the one reader whose rename wins."""
    good = path + LAST_GOOD
    try:
        return _parse(path)
    except FileNotFoundError:
        problem = None  # no record yet, or kept aside by another task just now: its last good copy tells
    except (OSError, ValueError) as exc:
        problem = _problem(exc)
        aside = f"{path}.unreadable-{clock():.0f}"
        try:
            os.replace(path, aside)
            log(MSG_KEPT_ASIDE.format(path=path, problem=problem, aside=aside, good=good))
        except FileNotFoundError:
            pass  # another reader kept it aside and said so
        except OSError as error:  # left in place: the next write replaces it
            log(MSG_KEPT_ASIDE.format(path=path, problem=problem, aside=f"in place ({_problem(error)})", good=good))
    try:
        return _parse(good)
    except FileNotFoundError:
        if problem is None:
            return {}
        good_problem = "missing"
    except (OSError, ValueError) as exc:
        good_problem = _problem(exc)
    raise PermanentFailure(ERR_BOTH.format(path=path, problem=problem or "missing", good=good,
                                           good_problem=good_problem))


def write_record(path: str, record: dict) -> None:
    """The record, then its last good copy: both always whole (write_atomic makes the directory)."""
    text = json.dumps(record, indent=1)
    # Readers on other hosts see the old file or the new one, whole; synced, as the count must outlive a crash.
    write_atomic(path, text, durable=True)
    write_atomic(path + LAST_GOOD, text, durable=True)


def record_path(model_dir: Optional[str]) -> Optional[str]:
    return os.path.join(model_dir, RECORD_FILE) if model_dir else None
