"""--set KEY=VALUE: every key of the key table can be overridden, checked exactly like the file."""

import re

import pytest

from estimator_mnist import cli
from estimator_mnist.config import TaskId, apply_overrides, configuration_markdown, describe_keys, load_config
from estimator_mnist.config.keys import all_keys
from estimator_mnist.config.overrides import (ERR_SET_DUPLICATE, ERR_SET_FORMAT, ERR_SET_KEY, ERR_SET_UNDER,
                                              ERR_SET_VALUE, parse_override)
from estimator_mnist.errors import UsageError
from tests.helpers import REPO

LOCAL = REPO / "config" / "local.yaml"


def pattern(template: str, **known) -> str:
    """A regex for an error template: each field as given (repr for !r fields), or anything when not given."""
    parts = re.split(r"(\{\w+(?:!r)?\})", template)
    regex = ""
    for part in parts:
        field = re.fullmatch(r"\{(\w+)(!r)?\}", part)
        if field is None:
            regex += re.escape(part)
        elif field[1] in known:
            value = known[field[1]]
            regex += re.escape(repr(value) if field[2] else str(value))
        else:
            regex += ".*"
    return "^" + regex + "$"


def test_values_are_read_as_yaml_and_coerced_like_the_file():
    config = load_config(LOCAL, ["model.learning_rate=1e-3", "training.max_steps=300", "tasks.worker:0.gpus=[0]",
                                 "evaluation.nice=5", "session.log_device_placement=true"])
    assert config.model.learning_rate == 0.001 and isinstance(config.model.learning_rate, float)
    assert config.training.max_steps == 300
    assert config.task_settings(TaskId("worker", 0)).gpus == (0,)
    assert config.task_settings(TaskId("chief", 0)).gpus is None
    assert config.evaluation.nice == 5 and config.session.log_device_placement is True


def test_strategy_given_as_a_name_takes_its_own_keys():
    config = load_config(LOCAL, ["strategy.communication=ring", "strategy.collective_timeout_secs=7"])
    assert config.strategy.name == "multi_worker_mirrored" and config.strategy.communication == "ring"
    assert config.strategy.collective_timeout_secs == 7


def test_cluster_and_paths_can_be_overridden(tmp_path):
    config = load_config(LOCAL, ["cluster.worker=[localhost:3001, localhost:3002]", f"run_dir={tmp_path}"])
    assert [str(a) for a in config.cluster.worker] == ["localhost:3001", "localhost:3002"]
    assert config.run_dir == str(tmp_path) and config.model_dir == str(tmp_path / "model")


def test_the_file_is_not_changed():
    data = {"model": {"learning_rate": 0.5}}
    assert apply_overrides(data, ["model.learning_rate=0.1"]) == {"model": {"learning_rate": 0.1}}
    assert data == {"model": {"learning_rate": 0.5}}


# Keys whose default is no value: a valid value for each.
SAMPLES = {"cluster.chief": ["localhost:1"], "cluster.worker": ["localhost:2"], "cluster.ps": ["localhost:3"],
           "cluster.evaluator": "localhost", "strategy.replicas_to_aggregate": 2, "strategy.devices": ["/cpu:0"],
           "tasks.<task>.gpus": [0], "run_dir": "/tmp/r", "model_dir": "/tmp/m", "data_dir": "/tmp/d"}


def test_every_listed_key_is_accepted_by_set():
    import yaml

    for key in all_keys():
        value = SAMPLES[key.name] if key.name in SAMPLES else key.default
        name = key.name.replace("<task>", "worker:0")
        text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        assert parse_override(f"{name}={text}") == (name, value), key.name


def test_not_key_value():
    with pytest.raises(UsageError, match=pattern(ERR_SET_FORMAT, text="model.learning_rate")):
        parse_override("model.learning_rate")


def test_unknown_key_lists_the_valid_ones():
    with pytest.raises(UsageError, match=pattern(ERR_SET_KEY, key="model.lr")) as info:
        parse_override("model.lr=0.1")
    assert "model.learning_rate" in str(info.value) and "tasks.<task>.gpus" in str(info.value)


def test_value_that_is_not_yaml():
    with pytest.raises(UsageError, match=pattern(ERR_SET_VALUE, key="tasks.all.gpus", value="[0, 1")):
        parse_override("tasks.all.gpus=[0, 1")


def test_a_key_given_twice_in_a_value_is_refused():
    """yaml.safe_load keeps the last of two equal keys: tasks.all's gpus would have been dropped silently."""
    value = "{all: {gpus: [0]}, all: {pin_cores: false}}"
    with pytest.raises(UsageError, match=pattern(ERR_SET_DUPLICATE, key="tasks", value=value, duplicate="all")):
        parse_override(f"tasks={value}")
    with pytest.raises(UsageError, match=pattern(ERR_SET_DUPLICATE, key="strategy", duplicate="name")):
        parse_override("strategy={name: mirrored, name: one_device}")


def test_bad_value_is_named_after_the_flag():
    with pytest.raises(UsageError, match=r"^--set model\.learning_rate=abc: model\.learning_rate must be a number, "
                                         r"got 'abc'$"):
        load_config(LOCAL, ["model.learning_rate=abc"])
    with pytest.raises(UsageError, match=r"^--set training\.max_steps=0: training\.max_steps must be a positive"):
        load_config(LOCAL, ["training.max_steps=0"])


def test_cross_field_errors_name_the_file_and_the_overrides():
    with pytest.raises(UsageError, match=r"^.*local\.yaml \(with --set tasks\.worker:3\.gpus=\[0\]\): tasks\.worker:3 "
                                         r"names no task of this cluster"):
        load_config(LOCAL, ["tasks.worker:3.gpus=[0]"])


def test_a_key_under_a_scalar_is_refused():
    with pytest.raises(UsageError, match=pattern(ERR_SET_UNDER, key="model.learning_rate", parent="model", got="adam")):
        apply_overrides({"model": "adam"}, ["model.learning_rate=1"])


def test_validate_takes_set_and_reports_exit_2(capsys):
    assert cli.main(["validate", "--cluster", str(LOCAL), "--set", "training.max_steps=300"]) == 0
    assert "max_steps 300" in capsys.readouterr().out
    assert cli.main(["validate", "--cluster", str(LOCAL), "--set", "model.lr=1"]) == 2
    assert capsys.readouterr().err.startswith("estimator-mnist: error: --set model.lr: unknown key")


def test_keys_lists_every_key_with_its_default():
    text = describe_keys()
    assert "training.batch_size_per_replica = 256" in text and "model.precision = 'auto'" in text
    assert "evaluation.nice = 'idle'" in text and "tasks.<task>.gpus" in text


def test_configuration_doc_matches_the_key_table():
    """docs/configuration.md is generated; regenerate with: estimator-mnist keys --markdown > docs/configuration.md"""
    assert (REPO / "docs" / "configuration.md").read_text(encoding="utf-8") == configuration_markdown()
