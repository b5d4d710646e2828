"""`--set dotted.key=value`: overrides applied to the YAML data before it is validated.

The value is read as a YAML scalar or flow collection (`1e-3`, `[0, 1]`,
`{name: ring}`), checked like the same value in the file, and then the whole
file is validated again, so an override can never produce a config that the
file itself could not.
"""

from __future__ import annotations

import copy
from typing import Iterable, Tuple

from estimator_mnist.errors import UsageError
from estimator_mnist.config.keys import all_keys, find_key
from estimator_mnist.config.strict_yaml import DuplicateKey, strict_load
from estimator_mnist.config.values import coerce

ERR_SET_FORMAT = "--set {text!r} is not KEY=VALUE; write it like --set model.learning_rate=0.001"
ERR_SET_KEY = "--set {key}: unknown key; valid keys (see 'estimator-mnist keys') are: {valid}"
ERR_SET_VALUE = "--set {key}={value}: the value is not valid YAML ({reason}); quote strings that contain ':' or '#'"
ERR_SET_DUPLICATE = ("--set {key}={value}: key {duplicate!r} is given twice in the value; YAML would silently keep "
                     "only the last, so remove one")
ERR_SET_UNDER = "--set {key}: {parent} is {got!r} in the file, not a mapping; set {parent} itself instead"


def parse_override(text: str) -> Tuple[str, object]:
    """('a.b', value) from 'a.b=value'."""
    import yaml  # Imported here so `--help` stays instant.

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(ERR_SET_FORMAT.format(text=text))
    try:
        value = strict_load(raw) if raw.strip() else None
    except DuplicateKey as exc:
        raise UsageError(ERR_SET_DUPLICATE.format(key=key, value=raw, duplicate=exc.key)) from None
    except yaml.YAMLError as exc:
        raise UsageError(ERR_SET_VALUE.format(key=key, value=raw, reason=str(getattr(exc, "problem", exc)))) from None
    row = find_key(key)
    if row is None and key != "strategy":
        valid = ", ".join(k.name for k in all_keys())
        raise UsageError(ERR_SET_KEY.format(key=key, valid=valid))
    if row is not None and row.field is not None:
        coerce(f"--set {key}={raw}", key, value, row.field)  # the same checks as in the file, named after the flag
    return key, value


def apply_overrides(data: dict, overrides: Iterable[str]) -> dict:
    """A copy of the raw YAML mapping with every override set at its dotted path."""
    result = copy.deepcopy(data)
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if part == "strategy" and depth == 0 and isinstance(child, str):
                child = {"name": child}  # 'strategy: NAME' is short for {name: NAME}
            if child is None:
                child = {}
            if not isinstance(child, dict):
                raise UsageError(ERR_SET_UNDER.format(key=key, parent=".".join(parts[:depth + 1]), got=child))
            node[part] = child
            node = child
        node[parts[-1]] = value
    return result
