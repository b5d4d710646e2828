import json
import os
import subprocess
import sys
from unittest import mock

import pytest

from conftest import REPO
from estimator_mnist import cli
from estimator_mnist.errors import UsageError


def run_cli(*args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "estimator_mnist", *args], capture_output=True, text=True,
                          cwd=REPO, env=full_env)


@pytest.mark.parametrize("version", [(3, 12, 1), (3, 13, 0), (3, 8, 18)])
def test_unsupported_python_is_named(version):
    with pytest.raises(UsageError, match=rf"^Python {version[0]}\.{version[1]} is not supported: this needs Python 3.9, 3.10 or 3.11 .*no wheels for Python {version[0]}\.{version[1]}\)"):
        cli.check_python(version)


def test_supported_python():
    cli.check_python((3, 11, 7))
    cli.check_python((3, 9, 0))


def test_train_without_cluster_or_tf_config():
    result = run_cli("train")
    assert result.returncode == 2
    assert result.stderr.strip() == ("estimator-mnist: error: train needs --cluster FILE --task TYPE:INDEX, or a "
                                     "TF_CONFIG environment variable (as Kubeflow's TFJob sets it)")


def test_train_with_task_but_no_cluster():
    result = run_cli("train", "--task", "worker:0")
    assert result.returncode == 2 and "train --task needs --cluster FILE" in result.stderr


def test_train_with_broken_tf_config():
    result = run_cli("train", env={"TF_CONFIG": "{oops"})
    assert result.returncode == 2 and "TF_CONFIG is not valid JSON" in result.stderr


def test_tf_config_command_prints_the_json():
    result = run_cli("tf-config", "--cluster", "config/local.yaml", "--task", "worker:0")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"cluster": {"chief": ["localhost:23456"], "worker": ["localhost:23457"]},
                                         "task": {"type": "worker", "index": 0}}
    bad = run_cli("tf-config", "--cluster", "config/local.yaml", "--task", "worker:5")
    assert bad.returncode == 2 and "there is no task worker:5" in bad.stderr


def test_keys_and_validate():
    keys = run_cli("keys").stdout
    assert "batch_size_per_replica: 256" in keys and "precision: 'auto'" in keys and "nice: 'idle'" in keys
    result = run_cli("validate", "--cluster", "config/two_workers.yaml")
    assert result.returncode == 0 and "tasks worker:0, worker:1, evaluator:0" in result.stdout


def test_kubeflow_tf_config_drives_train(tmp_path):
    """Without --task, the cluster comes from TF_CONFIG and the rest from the YAML."""
    yaml_file = tmp_path / "hyper.yaml"
    yaml_file.write_text("training: {max_steps: 7, save_checkpoints_steps: 7}\n")
    tf_config = {"cluster": {"worker": ["w0:2222", "w1:2222"], "evaluator": ["e0:2222"]},
                 "task": {"type": "evaluator", "index": 0}}
    args = cli.build_parser().parse_args(["train", "--cluster", str(yaml_file), "--model-dir", str(tmp_path / "m")])
    with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(tf_config)}):
        config, built = cli._train_config_and_tf_config(args)
    assert config.training.max_steps == 7
    assert config.model_dir == str(tmp_path / "m")
    # The config describes the cluster exactly as this task's TF_CONFIG does.
    assert [str(a) for a in config.cluster.chief] == ["w0:2222"]
    assert [str(a) for a in config.cluster.worker] == ["w1:2222"]
    assert built["cluster"] == {"chief": ["w0:2222"], "worker": ["w1:2222"]}
    assert built["task"] == {"type": "evaluator", "index": 0}
