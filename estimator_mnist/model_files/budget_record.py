"""The restart budget's record in model_dir, written with a last good copy beside it. No TensorFlow.

`restart_budget.json` holds a job's count (restart_budget.py); `restart_budget.json.last-good` is a copy of
the last record written whole. Both go through the storage layer, on a disk or a bucket alike: each is replaced
whole (a temporary file renamed into place, or an object upload), the record first, so at any moment both are
whole. A record that is not a budget record (a torn write, an edit by hand, a field of the wrong type such as
`"streak": "x"`) is corrupt: named in one line and kept aside, bytes unchanged, as
`restart_budget.json.unreadable-<UTC time to the microsecond>-<random>` (two corruptions never share a name);
the count goes on from the last good copy. If that one is corrupt too, the count is lost, and the job fails
closed: every task exits 1 with one line saying how to reset the budget on purpose. The count never silently
starts again from zero. A record the storage refuses to read is no corrupt record: exit 1 naming it; one the
storage fails to serve, exit 200 after bounded reads (checkpoints.read_strict); neither is moved.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Callable, Optional

from estimator_mnist import storage
from estimator_mnist.model_files.checkpoints import read_strict
from estimator_mnist.errors import PermanentFailure
from estimator_mnist.model_files.layout import ASIDE, LAST_GOOD, budget_file
from estimator_mnist.storage.errors import problem_text

MSG_KEPT_ASIDE = ("the restart budget's record {path} is unreadable ({problem}); its bytes are kept as {aside}; "
                  "the count goes on from its last good copy {good}")
ERR_BOTH = ("the restart budget's record {path} is unreadable ({problem}) and so is its last good copy {good} "
            "({good_problem}): the job's count of restarts is lost, so this task exits 1 rather than restart without "
            "one; to give the job a fresh budget on purpose, delete both files, then start the job again")
NOT_A_RECORD = "a JSON {kind}, not a record"
WRONG_TYPE = "its {key!r} is {value!r}, not {kind}"
# Each field and what it must be; the optional ones may be missing (a record of the first version has no streak).
_INT, _LIST = (int,), (list,)
_FIELDS = {"job": ((str,), False), "starts": (_INT, False), "incidents": (_LIST, False),
           "streak": (_INT, True), "restored": (_INT + (type(None),), True), "preemptions": (_LIST, True)}
_ENTRY_FIELDS = {"number": _INT, "time": (int, float)}  # what describe() and the count read of each entry


def _kind_name(kinds) -> str:
    return " or ".join("null" if k is type(None) else f"{'an' if k.__name__[0] in 'aeiou' else 'a'} {k.__name__}"
                       for k in kinds)


def _is(value, kinds) -> bool:
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


def check(record) -> dict:
    """`record` if it is a budget record, else ValueError saying what is wrong, in a few words."""
    if not isinstance(record, dict):
        raise ValueError(NOT_A_RECORD.format(kind=type(record).__name__))
    for key, (kinds, optional) in _FIELDS.items():
        if not (optional and key not in record) and not _is(record.get(key), kinds):
            raise ValueError(WRONG_TYPE.format(key=key, value=record.get(key), kind=_kind_name(kinds)))
    for key in ("incidents", "preemptions"):
        for entry in record.get(key, []):
            if not isinstance(entry, dict):
                raise ValueError(WRONG_TYPE.format(key=f"{key} entry", value=entry, kind="an object"))
            for field, kinds in _ENTRY_FIELDS.items():
                if not _is(entry.get(field), kinds):
                    raise ValueError(WRONG_TYPE.format(key=f"{key}[].{field}", value=entry.get(field),
                                                       kind=_kind_name(kinds)))
    return record


def _parse(path: str) -> Optional[dict]:
    """The record at `path`, None when there is none; ValueError for one that is corrupt. The storage's own
    failures are raised as what they are (read_strict)."""
    text = read_strict(path)
    return None if text is None else check(json.loads(text))


def aside_path(path: str, clock=time.time) -> str:
    """A name for a corrupt record's bytes that no other kept copy has: the time to the microsecond, and a
    random part for two tasks that keep two corruptions aside within one."""
    now = clock()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}"
    return f"{path}{ASIDE}{stamp}-{uuid.uuid4().hex[:8]}"


def read_record(path: str, log: Callable[[str], None], clock=time.time) -> dict:
    """The record at `path` (empty when the job has none yet), else its last good copy; PermanentFailure
    when neither can be read. A corrupt record is moved aside by the one reader whose move wins."""
    good = path + LAST_GOOD
    problem = None
    try:
        record = _parse(path)
        if record is not None:
            return record
    except ValueError as exc:
        problem = problem_text(exc)
        aside = aside_path(path, clock)
        try:
            storage.move(path, aside)
            log(MSG_KEPT_ASIDE.format(path=path, problem=problem, aside=aside, good=good))
        except FileNotFoundError:
            pass  # another reader kept it aside and said so
        except OSError as error:  # left in place: the next write replaces it
            log(MSG_KEPT_ASIDE.format(path=path, problem=problem, aside=f"in place ({problem_text(error)})",
                                      good=good))
    try:
        record = _parse(good)
    except ValueError as exc:
        good_problem = problem_text(exc)
    else:
        if record is not None:
            return record
        if problem is None:
            return {}  # no record yet, or kept aside by another task just now with no good copy: a new job
        good_problem = "missing"
    raise PermanentFailure(ERR_BOTH.format(path=path, problem=problem or "missing", good=good,
                                           good_problem=good_problem))


def write_record(path: str, record: dict) -> None:
    """The record, then its last good copy: both always whole (write_atomic makes the directory)."""
    text = json.dumps(record, indent=1)
    # Readers on other hosts see the old file or the new one, whole; synced, as the count must outlive a crash.
    storage.write_atomic(path, text, durable=True)
    storage.write_atomic(path + LAST_GOOD, text, durable=True)


def record_path(model_dir: Optional[str]) -> Optional[str]:
    return budget_file(model_dir) if model_dir else None
