"""Reading the YAML file and building the frozen `Config` from it, once, with any --set overrides.

Nothing here imports TensorFlow, so a bad file is rejected in well under a
second and before any process starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

from estimator_mnist.errors import UsageError
from estimator_mnist.model_files.layout import default_model_dir
from estimator_mnist.storage.urls import check_url
from estimator_mnist.config.cluster import parse_cluster
from estimator_mnist.config.overrides import apply_overrides
from estimator_mnist.config.rules import check_checkpoints, check_devices, check_strategy_roles, parse_strategy, parse_tasks
from estimator_mnist.config.strict_yaml import DuplicateKey, strict_load
from estimator_mnist.config.schema import SECTIONS, TOP_LEVEL_KEYS, Config, default_data_dir
from estimator_mnist.config.values import ERR_MISSING_KEY, ERR_TYPE, as_mapping, check_keys, parse_section

ERR_UNREADABLE = "{file}: cannot read the cluster file ({reason}); pass an existing YAML file with --cluster"
ERR_PATH = "{file}: {key} {path!r} cannot be used as a path ({reason}); choose another"
ERR_NOT_YAML = "{file}: not valid YAML ({reason}); fix the syntax at the place named"
ERR_DUPLICATE_KEY = ("{file}: line {line}: key {key!r} is given twice in one mapping (first at line {first}); "
                     "YAML would silently keep only the last, so remove one")
# run_dir holds each machine's own logs and the launcher's files; data_dir the decoded MNIST that tasks read
# through the local file system (docs/storage.md): neither may be a bucket.
LOCAL_ONLY = {"run_dir": "each machine's own logs and launch's records (what other machines read goes to "
                         "model_dir)",
              "data_dir": "read by every task through the local file system (prepare-data fills it on each "
                          "machine, or in the image)"}


def refuse_url(value: str, file: str, key: str) -> None:
    """One line (UsageError) for a URL where only a local path works (run_dir, data_dir)."""
    check_url(value, file, key, bucket_ok=False, local_why=LOCAL_ONLY.get(key, "read through the local file system"))


def _resolve_path(value, file, key, default) -> str:
    if value is None:
        value = default
    if not isinstance(value, str) or not value or "\x00" in value:  # no file name holds a NUL
        raise UsageError(ERR_TYPE.format(file=file, key=key, expected="a path", got=value))
    if key == "model_dir":
        bucket_url = check_url(value, file, key)
        if bucket_url:
            return bucket_url  # TensorFlow's gs:// file system and the storage layer's (docs/storage.md)
    else:
        refuse_url(value, file, key)
    # Relative paths are taken from the directory the command runs in, so that
    # the launcher and the tasks it starts (same cwd) agree on them.
    try:
        return str(Path(os.path.expanduser(value)).resolve())
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13), a name too long
        raise UsageError(ERR_PATH.format(file=file, key=key, path=value, reason=exc)) from None


def config_from_dict(data, source: str, label: Optional[str] = None) -> Config:
    """The frozen config of already-loaded YAML data; `label` (default: `source`) names it in errors."""
    file = label or source
    data = as_mapping(file, data, "the top level")
    check_keys(file, data, TOP_LEVEL_KEYS, "the top level")
    cluster = parse_cluster(file, data.get("cluster"))
    strategy = parse_strategy(file, data.get("strategy"))
    check_strategy_roles(file, strategy, cluster)
    tasks = parse_tasks(file, data.get("tasks"), cluster)
    sections = {name: parse_section(file, data.get(name), cls, name) for name, cls in SECTIONS.items()}
    check_checkpoints(file, sections["training"], cluster)
    stem = Path(source).stem if source else "run"
    run_dir = _resolve_path(data.get("run_dir"), file, "run_dir", os.path.join("runs", stem))
    model_dir = _resolve_path(data.get("model_dir"), file, "model_dir", default_model_dir(run_dir))
    data_dir = _resolve_path(data.get("data_dir"), file, "data_dir", default_data_dir())
    config = Config(source=source, cluster=cluster, strategy=strategy, tasks=tasks, run_dir=run_dir,
                    model_dir=model_dir, data_dir=data_dir, **sections)
    check_devices(config)
    return config


def read_yaml(path) -> dict:
    """The raw mapping of a YAML file, or a UsageError naming the file and the problem."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(ERR_UNREADABLE.format(file=file, reason=reason)) from None
    return parse_yaml(text, file)


def parse_yaml(text: str, file: str) -> dict:
    """The raw mapping of YAML text read from `file` (a trial.yaml read from a bucket), or a one-line UsageError."""
    import yaml  # Imported here so `--help` stays instant.

    try:
        data = strict_load(text)
    except DuplicateKey as exc:
        raise UsageError(ERR_DUPLICATE_KEY.format(file=file, line=exc.line, key=exc.key, first=exc.first)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = where + str(getattr(exc, "problem", None) or exc)
        raise UsageError(ERR_NOT_YAML.format(file=file, reason=reason)) from None
    if data is None:
        raise UsageError(ERR_MISSING_KEY.format(file=file, key="cluster", hint="the file is empty"))
    return dict(as_mapping(file, data, "the top level"))


def load_config(path, overrides: Iterable[str] = (), **paths) -> Config:
    """Reads and validates a cluster YAML file.

    `overrides` are --set KEY=VALUE texts; `paths` (model_dir, data_dir,
    run_dir) replace those keys when not None, as the command-line flags do.
    """
    overrides = list(overrides)
    data = apply_overrides(read_yaml(path), overrides)
    data.update({k: v for k, v in paths.items() if v is not None})
    label = f"{path} (with --set {', '.join(overrides)})" if overrides else None
    return config_from_dict(data, str(path), label)
