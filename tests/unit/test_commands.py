"""The commands' input handling, in-process: where train gets its cluster and task from."""


from estimator_mnist import cli, commands
from estimator_mnist.config import TaskId


def test_task_and_cluster_give_the_yaml_task(tmp_path):
    args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--task", "worker:0",
                                          "--run-dir", str(tmp_path)])
    config, task, tf_config, _, _, _ = commands._config_and_task(args)
    assert task == TaskId("worker", 0) and tf_config is None and config.run_dir == str(tmp_path)
