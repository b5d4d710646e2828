"""One task's TaskSpec: everything it runs with, resolved once before TensorFlow, as a frozen, versioned value.

The config (the YAML with `--set` and the path flags, and the cluster a
cluster manager gave: TF_CONFIG or Slurm's step), the task's plan (role and
index, the TF_CONFIG TensorFlow gets, threads, cores, environment, precision
as far as it is known without TensorFlow) and the notes its source adds.
`launch` writes one per task and starts `train --spec FILE`; `train` resolves
one itself when started by hand or by a cluster manager. Either way `train`
hands it, as JSON on a pipe, to its TensorFlow process
(`python -m estimator_mnist.tf_task`), which takes nothing else. Only what
TensorFlow alone can tell (a GPU's compute capability, for `precision: auto`)
is filled in there, once (`TaskPlan.with_precision`), and the whole spec is
that process's first log line. No TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from estimator_mnist.config import Config
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.task_plan import TaskPlan

SPEC_FORMAT = 1
ERR_SPEC = "{source}: not a TaskSpec of format {format} ({problem}); it is written by `launch` for `train --spec`"


@dataclass(frozen=True)
class TaskSpec:
    config: Config
    plan: TaskPlan
    notes: Tuple[str, ...] = ()     # what the task's source adds (TF_CONFIG replaced the YAML's cluster, ...)
    launched: bool = False          # written by `launch`, whose Supervisor watches the task's processes
    format: int = SPEC_FORMAT

    @property
    def tf_config(self) -> Optional[dict]:
        """The TF_CONFIG TensorFlow's RunConfig reads in this task; None for one process without a cluster."""
        return self.plan.tf_config

    def to_json(self) -> str:
        """One line: the task's first log line and what crosses each process boundary."""
        return json.dumps(_encode(self), separators=(",", ":"), sort_keys=False)


def spec_environment(environ: Mapping[str, str]) -> dict:
    """The environment of a process that runs from a TaskSpec: `environ` without TF_CONFIG, which only the task's
    TensorFlow process sets, from its spec (tf_task/__main__.py)."""
    return {k: v for k, v in environ.items() if k != "TF_CONFIG"}


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _tuples(value: Any) -> Any:
    """JSON lists back into the tuples the frozen config holds (in fields typed Any)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _decode(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        kinds = [a for a in args if a is not type(None)]
        return _decode(kinds[0], value) if len(kinds) == 1 else _tuples(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v) for v in value)
        return tuple(_decode(a, v) for a, v in zip(args, value))
    if hint is dict or origin is dict:
        return value  # TF_CONFIG: kept as JSON has it
    return _tuples(value)


def _build(cls, value: dict):
    if not isinstance(value, dict):
        raise TypeError(f"{cls.__name__} is not an object")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - names)
    if unknown:
        raise TypeError(f"{cls.__name__} has unknown field(s) {', '.join(unknown)}")
    return cls(**{name: _decode(hints[name], v) for name, v in value.items()})


def spec_from_json(text: str, source: str) -> TaskSpec:
    """The TaskSpec of `text`; a UsageError (one line) naming `source` for anything else."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(ERR_SPEC.format(source=source, format=SPEC_FORMAT, problem=f"not JSON: {exc}")) from None
    if not isinstance(value, dict) or value.get("format") != SPEC_FORMAT:
        found = value.get("format") if isinstance(value, dict) else type(value).__name__
        raise UsageError(ERR_SPEC.format(source=source, format=SPEC_FORMAT, problem=f"format {found!r}"))
    try:
        return _build(TaskSpec, value)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UsageError(ERR_SPEC.format(source=source, format=SPEC_FORMAT, problem=str(exc))) from None


def read_spec(path: str) -> TaskSpec:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the TaskSpec ({exc.strerror}); `launch` writes it beside the "
                         "task's log") from None
    return spec_from_json(text, path)
