"""A few fuzzed inputs through the real command line: exit 0, or exit 2 with one line and no traceback.

tests/unit/test_fuzzed_input.py tries hundreds of them in-process; these
check that the command line adds nothing on top (its own parsing, printing,
exit code) that a strange input could break.
"""

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, assume, given, settings

from tests.helpers import run_cli
from tests.unit.test_fuzzed_input import documents, near_valid_documents, overrides, tf_config_texts, train_input

A_FEW = settings(max_examples=4, derandomize=True, database=None, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def accepted_or_one_line(result) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    assert result.returncode in (0, 2), result.stderr[-3000:]
    if result.returncode == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("estimator-mnist: error: "), result.stderr[-3000:]


@A_FEW
@given(documents | near_valid_documents)
def test_yaml_documents_through_validate(document):
    with tempfile.TemporaryDirectory(prefix="fuzz-cli-") as directory:
        path = Path(directory, "cluster.yaml")
        path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
        accepted_or_one_line(run_cli("validate", "--cluster", str(path)))


@A_FEW
@given(overrides)
def test_set_values_through_validate(override):
    accepted_or_one_line(run_cli("validate", "--cluster", "config/local.yaml", "--set", override))


@A_FEW
@given(tf_config_texts)
def test_rejected_tf_configs_through_train(text):
    assume(not train_input(text))  # an accepted one would start training: the in-process check covers those
    accepted_or_one_line(run_cli("train", env={"TF_CONFIG": text}))
