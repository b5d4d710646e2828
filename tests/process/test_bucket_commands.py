"""Commands on a bucket that does not exist, against the real GCS API server: one line naming the bucket and exit
2, before anything else (predict, summary, sweep-status, ensemble; serve's own check is tested with serve). And a
string that looks like a URL but is none (gs:/b/x) refused by validate, naming the key, exit 2: never a local
folder named after a scheme."""

from __future__ import annotations

import numpy as np
import pytest

from estimator_mnist.storage.errors import ERR_NO_BUCKET
from estimator_mnist.storage.urls import ERR_MALFORMED
from tests.helpers import error_pattern, run_cli

MISSING = "no-such-bucket-57"
COMMANDS = {
    "predict": ["predict", "--model", f"gs://{MISSING}/x", "{digits}"],
    "summary": ["summary", f"gs://{MISSING}/x"],
    "sweep-status": ["sweep-status", "--sweep-dir", f"gs://{MISSING}/x"],
    "ensemble": ["ensemble", "--sweep-dir", f"gs://{MISSING}/x", "--top", "1"],
}


def _errors(result):
    return [line for line in result.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_on_a_missing_bucket_is_one_line_exit_2(command, gcs_bucket, gcs_env, tmp_path):
    del gcs_bucket  # the server is up, with a bucket of its own; this one does not exist
    digits = tmp_path / "digits.npy"
    np.save(digits, np.zeros((1, 28, 28), np.uint8))
    result = run_cli(*(arg.format(digits=digits) for arg in COMMANDS[command]), env=gcs_env)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = _errors(result)
    assert len(lines) == 1 and f"the bucket gs://{MISSING} does not exist" in lines[0], lines
    assert error_pattern(ERR_NO_BUCKET)


@pytest.mark.parametrize("url", ["gs:/b/x", "gs:b/x", "s3:/b/x"])
def test_a_model_dir_that_looks_like_a_url_but_is_none_is_refused_by_validate(url, write_yaml):
    path = write_yaml(f"cluster: {{chief: ['localhost:2222']}}\nmodel_dir: '{url}'\n")
    result = run_cli("validate", "--cluster", str(path))
    assert result.returncode == 2, result.stderr
    [line] = _errors(result)
    assert "model_dir" in line and f"{url!r} looks like a URL but is not one" in line, line
    assert error_pattern(ERR_MALFORMED)
