"""Coercing and checking one value of the YAML: its type, its choices, its range.

Every problem is a `UsageError` whose one-line message names the file (or the
--set flag), the dotted key and what to write instead. No TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Mapping

from estimator_mnist.errors import UsageError

# Error messages are constants so tests can match them and users can grep them.
ERR_NOT_MAPPING = "{file}: {key} must be a mapping of keys to values, got {got}"
ERR_UNKNOWN_KEY = "{file}: unknown key '{key}' in {section}; valid keys are: {valid}"
ERR_MOVED_KEY = "{file}: {old} is now {new}; rename it"
# Keys that moved to another section, so that an old file gets a precise hint.
MOVED_KEYS = {"launcher.eval_timeout_secs": "evaluation.final_timeout_secs"}
ERR_MISSING_KEY = "{file}: missing required key '{key}'; add it ({hint})"
ERR_TYPE = "{file}: {key} must be {expected}, got {got!r}"
ERR_CHOICE = "{file}: {key} must be one of {choices}, got {got!r}"
ERR_RANGE = "{file}: {key} must be {bound}, got {got!r}"
# TensorFlow holds steps, sizes and timeouts in int64: a larger whole number would pass here and fail at run time.
INT64_MAX = 2 ** 63 - 1
WHOLE_NUMBER = "a whole number (at most 2**63 - 1 in size)"

# YAML 1.1 (PyYAML) reads 1e-3 as a string; YAML 1.2 and every user read it as a number.
_FLOAT_TEXT = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")


def type_name(value) -> str:
    return type(value).__name__


def check_keys(file, mapping, valid, section) -> None:
    for key in mapping:
        if f"{section}.{key}" in MOVED_KEYS:
            raise UsageError(ERR_MOVED_KEY.format(file=file, old=f"{section}.{key}", new=MOVED_KEYS[f"{section}.{key}"]))
        if key not in valid:
            raise UsageError(ERR_UNKNOWN_KEY.format(file=file, key=key, section=section, valid=", ".join(valid)))


def as_mapping(file, value, key) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(ERR_NOT_MAPPING.format(file=file, key=key, got=type_name(value)))
    return value


def _typed(file, key, value, kind):
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(ERR_TYPE.format(file=file, key=key, expected="a whole number", got=value))
        if abs(value) > INT64_MAX:
            raise UsageError(ERR_TYPE.format(file=file, key=key, expected=WHOLE_NUMBER, got=value))
    elif kind is float:
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(ERR_TYPE.format(file=file, key=key, expected="a number", got=value))
        try:
            value = float(value)
        except OverflowError:  # a whole number past 1e308; 1e400 written as a float is already inf
            value = math.inf
        if not math.isfinite(value):  # inf passed `positive` and trained on NaN; nan is no number either
            raise UsageError(ERR_TYPE.format(file=file, key=key, expected="a finite number", got=value))
    elif kind is bool:
        if not isinstance(value, bool):
            raise UsageError(ERR_TYPE.format(file=file, key=key, expected="true or false", got=value))
    return value


def coerce(file, key, value, f: dataclasses.Field):
    """The value of field `f` as the frozen config holds it, or a UsageError naming `key`."""
    meta = f.metadata
    choices = meta.get("choices")
    if choices is not None:
        if value not in choices:
            raise UsageError(ERR_CHOICE.format(file=file, key=key, choices=", ".join(choices), got=value))
        return value
    kind = meta.get("kind")
    value = _typed(file, key, value, kind)
    check = meta.get("check")
    problem = check(value) if check else None
    if problem:
        raise UsageError(ERR_RANGE.format(file=file, key=key, bound=problem, got=value))
    return tuple(value) if kind == "list" and value is not None else value


def parse_values(file, mapping, cls, name) -> dict:
    """Validated {field: value} of a section mapping; unknown keys are refused."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    check_keys(file, mapping, list(fields), name)
    return {k: coerce(file, f"{name}.{k}", v, fields[k]) for k, v in mapping.items()}


def parse_section(file, raw, cls, name):
    return cls(**parse_values(file, as_mapping(file, raw, name), cls, name))


# --- checks of one value: None when it is fine, else what it must be -------------------------------
def positive(v):
    return None if v > 0 else "a positive number"


def non_negative(v):
    return None if v >= 0 else "zero or more"


def fraction(v):
    return None if 0 <= v < 1 else "in [0, 1)"


def held_out(v):
    # MNIST's training split has 60,000 images: at least 10,000 stay for training.
    return None if 0 <= v <= 50000 else "between 0 and 50000 (MNIST's training set has 60,000 images)"


def share(v):
    return None if 0 <= v <= 1 else "between 0 and 1"


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= INT64_MAX


def nice(v):
    if v == "idle" or (_whole(v) and 0 <= v <= 19):
        return None
    return "'idle' or a whole number between 0 and 19"


def ms_or_auto(v):
    if v == "auto" or (_whole(v) and v >= 0):
        return None
    return "'auto' or a whole number of milliseconds >= 0 (0 = no limit)"


def threads(v):
    if v == "auto" or (_whole(v) and v >= 0):
        return None
    return "'auto' or a whole number >= 0 (0 lets TensorFlow decide)"


def gpu_list(v):
    if v is None or (isinstance(v, list) and all(_whole(i) and i >= 0 for i in v) and len(set(v)) == len(v)):
        return None
    return "a list of distinct GPU indices such as [0, 1] ([] hides every GPU)"


_DEVICE = re.compile(r"^/(?:device:)?(?P<type>cpu|gpu|CPU|GPU):(?P<index>\d+)$")


def device_list(v):
    if isinstance(v, list) and v and all(isinstance(d, str) and _DEVICE.match(d) for d in v) and len(set(v)) == len(v):
        return None
    return "a list of distinct devices of this machine such as ['/gpu:0', '/gpu:1'] or ['/cpu:0', '/cpu:1']"


def device(v):
    if v == "auto" or (isinstance(v, str) and _DEVICE.match(v)):
        return None
    return "'auto' or a device such as '/gpu:0' or '/cpu:0'"


def device_index(name: str):
    """('cpu'|'gpu', index) of a device string validated by the config."""
    match = _DEVICE.match(name)
    return match["type"].lower(), int(match["index"])
