"""A newest checkpoint, or the checkpoint state file, the storage refuses to read, in a real `train`: one line,
exit 1, nothing moved aside, nothing rewritten.

CI runs as root, whose CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH read any file: the task runs under setpriv
without them (root still, so it reaches the interpreter under /root), and the files have mode 0. Where the
machine lacks root or setpriv the tests skip, and under CI=1 (.ci/run) they fail: CI runs every storage test.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

from estimator_mnist.model_files.checkpoints import ERR_READ_DENIED
from tests.helpers import REPO, error_pattern, free_ports
from tests.system_packages import require_debian_packages
from tests.unit.test_checkpoint_repair import _save_checkpoints

NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
               "--bounding-set=-dac_override,-dac_read_search", "--"]


NEEDS = "needs root and setpriv (util-linux) to drop the capabilities that read any file"


def require_root_and_setpriv() -> None:
    """Skips where the machine cannot run these tests; under CI=1 that is a failure, never a skip."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        require_debian_packages("util-linux")  # installs it where it can (CI runs as root)
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        if os.environ.get("CI"):
            pytest.fail(f"{NEEDS}; in CI this is a failure, not a skip")
        pytest.skip(NEEDS)


def _train_without_override(tmp_path, model_dir):
    (tmp_path / "c.yaml").write_text(f"cluster: {{chief: ['localhost:{free_ports(1)[0]}']}}\n"
                                     "training: {max_steps: 1000}\n")
    result = subprocess.run([*NO_OVERRIDE, sys.executable, "-m", "estimator_mnist", "train", "--cluster",
                             str(tmp_path / "c.yaml"), "--task", "chief:0", "--model-dir", str(model_dir),
                             "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=300,
                            cwd=REPO)
    return result, [line for line in result.stderr.splitlines() if "error:" in line]


def test_the_requirement_fails_under_ci_instead_of_skipping(monkeypatch):
    monkeypatch.setenv("CI", "1")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.fail.Exception, match="in CI this is a failure, not a skip"):
        require_root_and_setpriv()


def test_a_checkpoint_the_storage_refuses_is_one_line_exit_1_and_stays(tmp_path):
    require_root_and_setpriv()
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    paths = _save_checkpoints(str(model_dir))
    for suffix in (".index", ".data-00000-of-00001"):
        os.chmod(paths[-1] + suffix, 0)
    before = sorted(os.listdir(model_dir))
    result, errors = _train_without_override(tmp_path, model_dir)
    assert result.returncode == 1, result.stderr[-3000:]
    assert len(errors) == 1 and f"cannot read checkpoint {paths[-1]}: permission denied" in errors[0], errors
    assert sorted(os.listdir(model_dir)) == sorted(before + [".checkpoint-check.lock"])
    assert not (model_dir / "damaged").exists()


def test_a_state_file_the_storage_refuses_is_one_line_exit_1_and_not_rewritten(tmp_path):
    """Issue 54: TensorFlow's get_checkpoint_state answers None for it, which rewrote the state; no more."""
    require_root_and_setpriv()
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _save_checkpoints(str(model_dir))
    state = model_dir / "checkpoint"
    text = state.read_bytes()
    os.chmod(state, 0)
    result, errors = _train_without_override(tmp_path, model_dir)
    assert result.returncode == 1, result.stderr[-3000:]
    assert len(errors) == 1 and re.search(error_pattern(ERR_READ_DENIED), errors[0]), errors
    assert f"cannot read {state}: permission denied" in errors[0]
    assert state.read_bytes() == text and not (model_dir / "damaged").exists()
