"""A newest checkpoint the storage refuses to read, in a real `train`: one line, exit 1, nothing moved aside.

CI runs as root, whose CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH read any file: the task runs under setpriv
without them (root still, so it reaches the interpreter under /root), and the checkpoint's files have mode 0.
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO, free_ports
from tests.unit.test_checkpoint_repair import _save_checkpoints

NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
               "--bounding-set=-dac_override,-dac_read_search", "--"]


def test_a_checkpoint_the_storage_refuses_is_one_line_exit_1_and_stays(tmp_path):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to drop the capabilities that read any file")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    paths = _save_checkpoints(str(model_dir))
    for suffix in (".index", ".data-00000-of-00001"):
        os.chmod(paths[-1] + suffix, 0)
    before = sorted(os.listdir(model_dir))
    (tmp_path / "c.yaml").write_text(f"cluster: {{chief: ['localhost:{free_ports(1)[0]}']}}\n"
                                     "training: {max_steps: 1000}\n")
    result = subprocess.run([*NO_OVERRIDE, sys.executable, "-m", "estimator_mnist", "train", "--cluster",
                             str(tmp_path / "c.yaml"), "--task", "chief:0", "--model-dir", str(model_dir),
                             "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=300,
                            cwd=REPO)
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert result.returncode == 1, result.stderr[-3000:]
    assert len(errors) == 1 and f"cannot read checkpoint {paths[-1]}: permission denied" in errors[0], errors
    assert sorted(os.listdir(model_dir)) == sorted(before + [".checkpoint-check.lock"])
    assert not (model_dir / "damaged").exists()
