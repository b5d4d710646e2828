"""The commands' input handling, in-process: where train gets its cluster and task from."""

import json
import os
from unittest import mock

from estimator_mnist import cli, commands
from estimator_mnist.config import TaskId


def test_kubeflow_tf_config_drives_train(tmp_path):
    """Without --task, the cluster comes from TF_CONFIG and the rest from the YAML and --set."""
    yaml_file = tmp_path / "hyper.yaml"
    yaml_file.write_text("training: {max_steps: 7, save_checkpoints_steps: 7}\n")
    tf_config = {"cluster": {"worker": ["w0:2222", "w1:2222"], "evaluator": ["e0:2222"]},
                 "task": {"type": "evaluator", "index": 0}}
    args = cli.build_parser().parse_args(["train", "--cluster", str(yaml_file), "--model-dir", str(tmp_path / "m"),
                                          "--set", "model.learning_rate=1e-4"])
    with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(tf_config)}):
        config, task, built = commands._config_and_task(args)
    assert config.training.max_steps == 7 and config.model.learning_rate == 0.0001
    assert config.model_dir == str(tmp_path / "m")
    assert task == TaskId("evaluator", 0)
    # The config describes the cluster exactly as this task's TF_CONFIG does.
    assert [str(a) for a in config.cluster.chief] == ["w0:2222"]
    assert [str(a) for a in config.cluster.worker] == ["w1:2222"]
    assert built["cluster"] == {"chief": ["w0:2222"], "worker": ["w1:2222"]}


def test_task_and_cluster_give_the_yaml_task(tmp_path):
    args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--task", "worker:0",
                                          "--run-dir", str(tmp_path)])
    config, task, tf_config = commands._config_and_task(args)
    assert task == TaskId("worker", 0) and tf_config is None and config.run_dir == str(tmp_path)
