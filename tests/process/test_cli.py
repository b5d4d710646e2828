"""Each command once as a real process: its exit code, and one line on stderr for bad input."""

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from estimator_mnist import cli, commands
from estimator_mnist.plan.task_spec import spec_from_json
from tests.helpers import REPO, TF_STARTUP_LINES, run_cli


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


def run_into_pipe(args, read_first: int = 0) -> subprocess.CompletedProcess:
    """`estimator-mnist ARGS | READER`, where the reader takes `read_first` bytes (none: `| true`) and then closes
    the pipe. The pipe holds one page, so that a longer output is still being written when the reader leaves."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    if not read_first:
        os.close(read)  # gone before the command writes anything
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    proc = subprocess.Popen([sys.executable, "-m", "estimator_mnist", *args], stdout=write, stderr=subprocess.PIPE,
                            cwd=REPO, env=env)
    os.close(write)
    if read_first:
        assert os.read(read, read_first)
        os.close(read)
    _, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(args, proc.returncode, "", err.decode())


@pytest.mark.parametrize("args", [["keys"], ["keys", "--markdown"], ["validate", "--cluster", "config/local.yaml"],
                                  ["tf-config", "--cluster", "config/local.yaml", "--task", "worker:0"]])
def test_a_reader_that_closed_the_pipe_ends_the_command_quietly(args):
    result = run_into_pipe(args)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_reader_that_stops_after_the_first_line_ends_the_command_quietly():
    assert len(run_cli("keys").stdout) > 4096 + 2048  # still writing when `head -1` leaves
    result = run_into_pipe(["keys"], read_first=100)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_task_started_by_hand_shows_none_of_tensorflow_s_known_start_up_lines(tmp_path):
    """The real `train` and its TensorFlow process (which fails on the missing data after its start-up), at
    TF_CPP_MIN_LOG_LEVEL=0 so that the oneDNN notice is printed too; beside it, TensorFlow imported directly."""
    env = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_ENABLE_ONEDNN_OPTS": "1"}
    direct = subprocess.run([sys.executable, "-m", "tests.process.startup_lines_probe", "tensorflow"],
                            capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=300)
    messages = [line.split("] ", 1)[1] for line in TF_STARTUP_LINES]
    assert all(message in direct.stderr for message in messages), direct.stderr  # what there is to leave out
    result = run_cli("train", "--cluster", "config/one_device.yaml", "--task", "chief:0", "--data-dir",
                     str(tmp_path / "empty"), "--run-dir", str(tmp_path / "run"), env=env, timeout=300)
    output = result.stdout + result.stderr
    assert [m for m in messages if m in output] == []
    assert "Could not find cuda drivers on your machine" in output  # not on the list: still shown
    assert "[estimator-mnist] task chief:0 role=chief" in result.stderr
    assert result.returncode == 2 and "MNIST is not prepared in" in result.stderr.strip().splitlines()[-1]
