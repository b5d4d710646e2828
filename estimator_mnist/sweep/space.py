"""The search space of a sweep: `--param KEY=V1,V2,...` and ranges, expanded to the trials' values. No TensorFlow.

Every value is checked as the same key in the YAML would be, before any
trial starts. Without `--samples` the sweep is the full grid (in the order
given, the last parameter varying fastest); with it, N combinations drawn
with a seeded generator, so the same command draws the same trials.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from estimator_mnist.config.keys import all_keys, find_key
from estimator_mnist.config.values import coerce
from estimator_mnist.errors import UsageError

SWEPT_SECTIONS = ("model", "training", "evaluation", "session")
RANGE_KINDS = ("uniform", "loguniform", "int")
ERR_NO_PARAMS = "sweep needs at least one --param KEY=V1,V2,... (e.g. --param model.learning_rate=0.001,0.003)"
ERR_PARAM_FORMAT = "--param {text!r} is not KEY=V1,V2,...; write it like --param model.learning_rate=0.001,0.003"
ERR_PARAM_KEY = "--param {key}: unknown key; sweepable keys (see 'estimator-mnist keys') are: {valid}"
ERR_PARAM_NOT_SWEPT = ("--param {key}: {what} is not swept (each trial is one process on its own device, in its own "
                       "directory); sweep keys of {sections}")
ERR_PARAM_TWICE = "--param {key} is given twice; give all of its values in one --param {key}=V1,V2,..."
ERR_PARAM_EMPTY = "--param {key}: an empty value in {text!r}; give values separated by commas, e.g. {key}=V1,V2"
ERR_PARAM_VALUE = "--param {key}={value}: not valid YAML ({reason}); quote strings that contain ':' or '#'"
ERR_RANGE = ("--param {key}={text}: a range is {kind}:LOW:HIGH with LOW < HIGH{extra}, e.g. "
             "{key}={kind}:{example}")
ERR_RANGE_NEEDS_SAMPLES = ("--param {key}={text}: a range has no grid; add --samples N to draw N random trials, or "
                           "list the values: {key}=V1,V2")
ERR_SAMPLES = "--samples {samples}: must be a whole number >= 1"
EXAMPLES = {"uniform": "0.1:0.5", "loguniform": "0.0001:0.01", "int": "64:256"}


@dataclass(frozen=True)
class Param:
    key: str
    text: str                                   # as given, for the record of the sweep
    values: Tuple = ()                          # a list of choices ...
    dist: Optional[Tuple[str, float, float]] = None  # ... or (kind, low, high)


def as_overrides(values: Dict[str, object]) -> List[str]:
    """A trial's values as --set texts (JSON is YAML), for the trial's YAML, best.yaml and the console."""
    import json  # pylint: disable=import-outside-toplevel

    return [f"{key}={json.dumps(value)}" for key, value in values.items()]


def _split(text: str) -> List[str]:
    """Splits on commas outside brackets, so that a list value like [0, 1] stays whole."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in parts + [text[start:]]]


def check_value(key: str, raw: str):
    """The value of `raw` for `key`, checked like the YAML's, or a one-line UsageError."""
    import yaml  # Imported here so `--help` stays instant.

    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise UsageError(ERR_PARAM_VALUE.format(key=key, value=raw, reason=getattr(exc, "problem", exc))) from None
    return coerce(f"--param {key}={raw}", key, value, find_key(key).field)


def _check_key(key: str) -> None:
    section = key.split(".", 1)[0]
    if section in ("cluster", "strategy", "tasks") or (find_key(key) is not None and section not in SWEPT_SECTIONS):
        what = f"{section}.*" if "." in key else key
        raise UsageError(ERR_PARAM_NOT_SWEPT.format(key=key, what=what, sections=", ".join(SWEPT_SECTIONS)))
    row = find_key(key)
    if row is None or row.field is None:
        valid = ", ".join(k.name for k in all_keys() if k.name.split(".", 1)[0] in SWEPT_SECTIONS)
        raise UsageError(ERR_PARAM_KEY.format(key=key, valid=valid))


def _range(key: str, text: str, kind: str, rest: str) -> Tuple[str, float, float]:
    extra = " (whole numbers)" if kind == "int" else " (both > 0)" if kind == "loguniform" else ""
    error = UsageError(ERR_RANGE.format(key=key, text=text, kind=kind, extra=extra, example=EXAMPLES[kind]))
    low_text, sep, high_text = rest.partition(":")
    try:
        low, high = (int(low_text), int(high_text)) if kind == "int" else (float(low_text), float(high_text))
    except ValueError:
        raise error from None
    if not sep or not low < high or (kind == "loguniform" and low <= 0):
        raise error
    for bound in (low, high):
        check_value(key, str(bound))  # the range's ends must be valid values of the key
    return kind, low, high


def parse_param(text: str) -> Param:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(ERR_PARAM_FORMAT.format(text=text))
    _check_key(key)
    kind, colon, rest = raw.strip().partition(":")
    if colon and kind in RANGE_KINDS:
        return Param(key, text, dist=_range(key, raw.strip(), kind, rest))
    values = []
    for part in _split(raw):
        if not part:
            raise UsageError(ERR_PARAM_EMPTY.format(key=key, text=text))
        value = check_value(key, part)
        if value not in values:
            values.append(value)
    return Param(key, text, values=tuple(values))


def parse_params(texts: Sequence[str]) -> List[Param]:
    if not texts:
        raise UsageError(ERR_NO_PARAMS)
    params, seen = [], set()
    for text in texts:
        param = parse_param(text)
        if param.key in seen:
            raise UsageError(ERR_PARAM_TWICE.format(key=param.key))
        seen.add(param.key)
        params.append(param)
    return params


def _draw(param: Param, rng: random.Random):
    if param.dist is None:
        return rng.choice(param.values)
    kind, low, high = param.dist
    if kind == "int":
        return rng.randint(low, high)
    value = math.exp(rng.uniform(math.log(low), math.log(high))) if kind == "loguniform" else rng.uniform(low, high)
    return float(f"{value:.4g}")  # readable in tables and YAML; finer than any sweep resolves


def expand(params: Sequence[Param], samples: Optional[int], seed: int) -> List[Dict[str, object]]:
    """The trials' values, in order: the grid, or `samples` seeded draws."""
    if samples is None:
        ranged = next((p for p in params if p.dist is not None), None)
        if ranged is not None:
            raise UsageError(ERR_RANGE_NEEDS_SAMPLES.format(key=ranged.key, text=ranged.text.partition("=")[2]))
        return [dict(zip([p.key for p in params], combo)) for combo in itertools.product(*(p.values for p in params))]
    if samples < 1:
        raise UsageError(ERR_SAMPLES.format(samples=samples))
    rng = random.Random(seed)
    return [{p.key: _draw(p, rng) for p in params} for _ in range(samples)]
