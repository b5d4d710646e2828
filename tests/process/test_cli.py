"""Each command once as a real process: its exit code, and one line on stderr for bad input."""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from estimator_mnist import cli, commands
from estimator_mnist.plan.task_spec import spec_from_json
from tests.helpers import REPO, run_cli


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("estimator-mnist: error: "), result.stderr[-2000:]
    return lines[0]


def test_train_without_cluster_or_tf_config():
    assert one_error_line(run_cli("train")) == (
        "estimator-mnist: error: train needs --cluster FILE (with --task TYPE:INDEX unless the file names a single "
        "trainer), or a TF_CONFIG environment variable (as Kubeflow's TFJob sets it)")


def test_train_with_task_but_no_cluster():
    assert "train --task needs --cluster FILE" in one_error_line(run_cli("train", "--task", "worker:0"))


def test_train_with_broken_tf_config():
    assert "TF_CONFIG is not valid JSON" in one_error_line(run_cli("train", env={"TF_CONFIG": "{oops"}))


def test_tf_config_prints_the_json_or_names_the_task():
    result = run_cli("tf-config", "--cluster", "config/local.yaml", "--task", "worker:0")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"cluster": {"chief": ["localhost:23456"], "worker": ["localhost:23457"]},
                                         "task": {"type": "worker", "index": 0}}
    assert "there is no task worker:5" in one_error_line(
        run_cli("tf-config", "--cluster", "config/local.yaml", "--task", "worker:5"))


def test_keys_and_validate():
    assert "training.batch_size_per_replica = 256" in run_cli("keys").stdout
    result = run_cli("validate", "--cluster", "config/two_workers.yaml")
    assert result.returncode == 0 and "tasks worker:0, worker:1, evaluator:0" in result.stdout


@pytest.mark.parametrize("command", ["launch", "validate"])
def test_bad_input_exits_2_in_one_line(command, tmp_path):
    line = one_error_line(run_cli(command, "--cluster", "config/local.yaml", "--set", "model.learning_rate=abc"))
    assert line.endswith("model.learning_rate must be a number, got 'abc'")


def test_prepare_data_names_a_bad_idx_dir(tmp_path):
    line = one_error_line(run_cli("prepare-data", "--data-dir", str(tmp_path / "d"), "--from-idx",
                                  str(tmp_path / "nope")))
    assert "--from-idx" in line and "is not a directory" in line


def test_train_applies_its_plan_where_it_starts(tmp_path):
    """Started by hand (no launcher): the GPU mask from the YAML is set and the first log line shows it."""
    result = run_cli("train", "--cluster", "config/one_device.yaml", "--task", "chief:0",
                     "--set", "tasks.chief:0.gpus=[1]", "--data-dir", str(tmp_path / "empty"),
                     "--run-dir", str(tmp_path / "run"), timeout=300)
    first = next(line for line in result.stderr.splitlines() if "[estimator-mnist] task chief:0 role=chief" in line)
    assert "CUDA_VISIBLE_DEVICES='1'" in first and "TF_CPP_MIN_LOG_LEVEL='1'" in first and "umask=027" in first
    assert result.returncode == 2 and "MNIST is not prepared in" in result.stderr.strip().splitlines()[-1]
    assert (REPO / "config" / "one_device.yaml").is_file()


@pytest.mark.parametrize("args, expected", [
    (["--param", "model.nope=1"], "--param model.nope: unknown key"),
    (["--param", "model.learning_rate=0.1,fast"], "model.learning_rate must be"),
    (["--param", "cluster.worker=a:1"], "cluster.* is not swept"),
    ([], "sweep needs at least one --param"),
    (["--param", "model.dropout=0.1,0.2", "--parallel", "64"], "--parallel 64: there are only"),
])
def test_sweep_refuses_bad_input_before_any_trial(args, expected, tmp_path):
    result = run_cli("sweep", "--cluster", "config/tuning.yaml", "--sweep-dir", str(tmp_path / "s"), *args)
    assert expected in one_error_line(result)
    assert not (tmp_path / "s").exists()


def test_ensemble_refuses_a_directory_without_a_sweep(tmp_path):
    assert "no sweep.json there" in one_error_line(run_cli("ensemble", "--sweep-dir", str(tmp_path)))


def test_the_tensorflow_process_runs_from_its_spec_alone(tmp_path):
    """Its only input is the TaskSpec on stdin: the caller's TF_CONFIG and working directory (no YAML there) do
    not matter, and its first log line is the spec `train` resolved, --set value included, precision filled in."""
    args = cli.build_parser().parse_args([
        "train", "--cluster", str(REPO / "config" / "one_device.yaml"), "--task", "chief:0",
        "--set", "training.batch_size_per_replica=24", "--data-dir", str(tmp_path / "empty"),
        "--run-dir", str(tmp_path / "run")])
    spec = commands.resolve(args).spec()
    ready_read, ready_write = os.pipe()
    try:
        result = subprocess.run([sys.executable, "-m", "estimator_mnist.tf_task", "--ready-fd", str(ready_write)],
                                input=spec.to_json(), pass_fds=(ready_write,), capture_output=True, text=True,
                                cwd=tmp_path, timeout=300,
                                env={**os.environ, "TF_CONFIG": "{not what the task runs with"})
    finally:
        os.close(ready_read)
        os.close(ready_write)
    ours = [line for line in result.stderr.splitlines() if "[estimator-mnist] " in line]
    assert ours and " spec {" in ours[0], result.stderr[-3000:]
    logged = spec_from_json(ours[0].split(" spec ", 1)[1], "the log")
    assert logged == replace(spec, plan=spec.plan.with_precision([]))
    assert logged.config.training.batch_size_per_replica == 24 and logged.plan.precision != "auto"
    assert result.returncode == 2 and "MNIST is not prepared in" in result.stderr.strip().splitlines()[-1]
