"""The commands' input handling, in-process: where train gets its cluster and task from."""


from estimator_mnist import cli, commands
from estimator_mnist.config import TaskId


def test_task_and_cluster_give_the_yaml_task(tmp_path):
    args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--task", "worker:0",
                                          "--run-dir", str(tmp_path)])
    resolved = commands.resolve(args)
    assert resolved.task == TaskId("worker", 0) and resolved.source.tf_config is None and resolved.source.by_hand
    assert resolved.config.run_dir == str(tmp_path)


def test_argparse_s_own_errors_are_one_line_too(capsys):
    """Found by the fuzzing of --set values: `--set -a=1` printed argparse's usage block before its error."""
    assert cli.main(["validate", "--cluster", "config/local.yaml", "--set", "-a=1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "estimator-mnist: error: estimator-mnist validate: argument --set: expected one argument; "
        "see 'estimator-mnist validate --help'"]
    assert cli.main(["no-such-command"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("estimator-mnist: error: estimator-mnist: argument COMMAND: invalid choice: 'no-such-command'")
