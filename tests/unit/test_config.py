"""The YAML file: every bad file refused with its one-line message, defaults, parsing, freezing."""

import os
import re
from pathlib import Path

import pytest

from estimator_mnist import cli
from estimator_mnist.config import TaskId, load_config, schema as C
from estimator_mnist.errors import UsageError
from estimator_mnist.storage.urls import ERR_BUCKET, ERR_MALFORMED, ERR_SCHEME
from tests.helpers import REPO

BAD = Path(__file__).parent / "bad_configs"

# file -> regex its one-line message must match (file name and key are always named).
EXPECTED = {
    "unknown_top_key.yaml": r"unknown key 'trainig' in the top level; valid keys are: cluster, strategy, tasks, session, model, training",
    "unknown_section_key.yaml": r"unknown key 'max_step' in training; valid keys are: .*max_steps",
    "wrong_type_steps.yaml": r"training\.max_steps must be a whole number, got 'many'",
    "bool_as_int.yaml": r"training\.batch_size_per_replica must be a whole number, got True",
    "malformed_address.yaml": r"cluster\.chief\[0\] is 'localhost', not a 'host:port' address",
    "duplicate_address.yaml": r"cluster\.worker\[0\] repeats the address localhost:2222 already used by cluster\.chief\[0\]",
    "port_out_of_range.yaml": r"cluster\.chief\[0\] has port 70000, outside 1-65535",
    "port_zero.yaml": r"cluster\.worker\[0\] has port 0, outside 1-65535",
    "no_chief_no_worker.yaml": r"cluster has no chief and no worker",
    "two_chiefs.yaml": r"cluster\.chief lists 2 addresses but at most one chief is allowed",
    "two_evaluators.yaml": r"cluster\.evaluator lists 2 addresses but at most one evaluator is allowed",
    "unknown_strategy.yaml": r"strategy\.name must be one of multi_worker_mirrored, parameter_server, parameter_server_sync, mirrored, one_device, got 'mirrored_everywhere'",
    "mwms_with_ps.yaml": r"strategy 'multi_worker_mirrored' does not use parameter servers but cluster\.ps is set; remove cluster\.ps",
    "negative_batch.yaml": r"training\.batch_size_per_replica must be a positive number, got -8",
    "zero_steps.yaml": r"training\.max_steps must be a positive number, got 0",
    "not_yaml.yaml": r"not valid YAML \(line \d+, column \d+: ",
    "duplicate_key.yaml": r"line 6: key 'model_dir' is given twice in one mapping \(first at line 3\); YAML would "
                          r"silently keep only the last, so remove one",
    "duplicate_nested_key.yaml": r"line 6: key 'max_steps' is given twice in one mapping \(first at line 4\)",
    "empty.yaml": r"missing required key 'cluster'.*the file is empty",
    "no_cluster.yaml": r"missing required key 'cluster'",
    "cluster_not_mapping.yaml": r"cluster must be a mapping of keys to values, got list",
    "bad_choice_network.yaml": r"model\.network must be one of classic_cnn, tutorial_cnn, got 'resnet'",
    "learning_rate_negative.yaml": r"model\.learning_rate must be a positive number, got -0\.1",
    "checkpoint_after_end.yaml": r"training\.save_checkpoints_steps must be at most training\.max_steps \(100\), got 500",
    "trace_after_end.yaml": r"training\.trace_step must be at most training\.max_steps \(100\), or 0 \(off\), got 101",
    "empty_worker_list.yaml": r"cluster\.worker is an empty list",
    "bad_threads.yaml": r"tasks\.all\.intra_op_threads must be 'auto' or a whole number",
    "wrong_strategy_key.yaml": r"strategy\.replicas_to_aggregate applies to strategy parameter_server_sync only, not 'multi_worker_mirrored'; remove it",
    "strategy_without_name.yaml": r"missing required key 'strategy\.name'; add it \(one of multi_worker_mirrored, ",
    "unknown_strategy_key.yaml": r"unknown key 'comunication' in strategy; valid keys are: name, communication, ",
    "ps_without_ps.yaml": r"strategy 'parameter_server' keeps the variables on parameter servers but cluster\.ps is empty; add cluster\.ps",
    "ps_sync_without_chief.yaml": r"strategy 'parameter_server_sync' needs a chief .*; move one address from cluster\.worker to cluster\.chief",
    "replicas_to_aggregate_too_large.yaml": r"strategy\.replicas_to_aggregate is 3 but the cluster has only 2 training replicas .*; use at most 2",
    "mirrored_two_machines.yaml": r"strategy 'mirrored' runs one training process on one machine but cluster\.worker is set; keep only cluster\.chief",
    "mirrored_without_chief.yaml": r"strategy 'mirrored' runs one training process on one machine but cluster\.worker is set",
    "one_device_with_ps.yaml": r"strategy 'one_device' runs one training process on one machine but cluster\.ps is set",
    "nccl_on_cpu_task.yaml": r"strategy\.communication is nccl but task worker:0 has no GPU \(its gpus is \[\]\); use communication: ring or auto",
    "mirrored_nccl_on_cpus.yaml": r"strategy\.cross_device_ops is nccl but strategy\.devices has no GPU .*; use cross_device_ops: auto",
    "mirrored_gpu_not_visible.yaml": r"strategy\.devices must be one of the 1 GPU\(s\) the chief sees, /gpu:0 to /gpu:0 .*got '/gpu:1'",
    "bad_device.yaml": r"strategy\.devices must be a list of distinct devices .*got \['/tpu:0'\]",
    "repeated_gpu.yaml": r"tasks\.worker:0\.gpus must be a list of distinct GPU indices .*got \[0, 0\]",
    "unknown_task_selector.yaml": r"tasks\.worker:3 names no task of this cluster; use 'all', a role \(chief, worker\) or a task \(chief:0, worker:0\)",
    "unknown_task_key.yaml": r"unknown key 'gpu' in tasks\.all; valid keys are: gpus, gpu_memory_growth",
    "placement_not_bool.yaml": r"session\.log_device_placement must be true or false, got 'yes'",
    "restart_policy_typo.yaml": r"restart\.policy must be one of never, on_failure, got 'always'",
    "network_mode_typo.yaml": r"launcher\.network must be one of auto, private, host, got 'none'",
    "keep_one_checkpoint_with_evaluator.yaml": r"training\.keep_checkpoint_max must be at least 2 when the cluster has an evaluator",
    "memory_fraction_too_big.yaml": r"tasks\.chief\.gpu_memory_fraction must be between 0 and 1, got 1\.5",
    "dropout_one.yaml": r"model\.dropout must be in \[0, 1\), got 1\.0",
    "precision_typo.yaml": r"model\.precision must be one of auto, float32, mixed_bfloat16, mixed_float16, got 'bf16'",
    "evaluator_nice_out_of_range.yaml": r"evaluation\.nice must be 'idle' or a whole number between 0 and 19, got 25",
    # Found by tests/unit/test_fuzzed_input.py, each its minimal example: a traceback, or a value TensorFlow rejects.
    "learning_rate_past_float.yaml": r"model\.learning_rate must be a finite number, got inf",
    "learning_rate_inf.yaml": r"model\.learning_rate must be a finite number, got inf",
    "max_steps_past_int64.yaml": r"training\.max_steps must be a whole number \(at most 2\*\*63 - 1 in size\), got 9223372036854775808",
    "run_dir_nul.yaml": r"run_dir must be a path, got 'runs/a\\x00b'",
    "model_dir_s3.yaml": r"model_dir 's3://bucket/run' is a s3:// URL, which this product does not read or write; "
                         r"give gs://BUCKET/PATH",
    "run_dir_bucket.yaml": r"run_dir 'gs://bucket/runs' is a gs:// URL, but run_dir is each machine's own logs",
    "threads_past_int64.yaml": r"tasks\.all\.intra_op_threads must be 'auto' or a whole number",
    "validation_split_too_large.yaml": r"data\.validation_examples must be between 0 and 50000 \(MNIST's training set "
                                       r"has 60,000 images\), got 60000",
}


def test_every_bad_file_has_an_expectation():
    assert sorted(p.name for p in BAD.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_file_is_rejected_with_a_one_line_message(name):
    path = BAD / name
    with pytest.raises(UsageError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path) + ": ")
    assert re.search(EXPECTED[name], message), message


def test_unreadable_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(UsageError, match=r"nope\.yaml: cannot read the cluster file \(No such file or directory\); pass an existing YAML"):
        load_config(missing)


def test_defaults_and_paths(write_yaml, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESTIMATOR_MNIST_DATA_DIR", raising=False)
    config = load_config(write_yaml("cluster: {chief: ['localhost:2222'], worker: ['127.0.0.1:2223']}\n", "mine.yaml"))
    assert config.strategy == C.StrategyConfig(name="multi_worker_mirrored")
    assert config.task_settings(TaskId("worker", 0)) == C.TaskSettings()
    assert config.cluster.chief == (C.Address("localhost", 2222),)
    assert config.cluster.num_workers == 2
    assert config.cluster.evaluator is None
    assert config.training == C.TrainingConfig()
    assert config.run_dir == str(tmp_path / "runs" / "mine")
    assert config.model_dir == str(tmp_path / "runs" / "mine" / "model")
    assert config.data_dir == str(Path.home() / "tensorflow_datasets")


def test_config_is_frozen(write_yaml):
    config = load_config(write_yaml("cluster: {worker: ['localhost:2222']}\n"))
    with pytest.raises(Exception):
        config.training.max_steps = 5
    with pytest.raises(Exception):
        config.strategy = "other"


def test_values_are_parsed(write_yaml):
    config = load_config(write_yaml("""
cluster:
  worker: ["localhost:2222", "[::1]:2223"]
  evaluator: "localhost:9999"
model: {network: tutorial_cnn, optimizer: momentum, learning_rate: 1, momentum: 0.5}
training: {batch_size_per_replica: 32, max_steps: 10, save_checkpoints_steps: 5}
evaluation: {throttle_secs: 0, export: best}
tasks:
  worker:1: {intra_op_threads: 3, gpus: [1], gpu_memory_fraction: 0.5}
  all: {inter_op_threads: 4, gpu_memory_growth: true}
  worker: {intra_op_threads: 2, gpus: []}
session: {log_device_placement: true, operation_timeout_ms: 5000}
"""))
    assert config.cluster.worker[1] == C.Address("::1", 2223)
    assert str(config.cluster.worker[1]) == "[::1]:2223"
    assert config.cluster.evaluator == "localhost"
    assert config.model.learning_rate == 1.0 and isinstance(config.model.learning_rate, float)
    assert config.model.network == "tutorial_cnn"
    # The most specific selector wins, whatever the order in the file.
    assert config.task_settings(TaskId("worker", 1)) == C.TaskSettings(
        gpus=(1,), gpu_memory_growth=True, gpu_memory_fraction=0.5, intra_op_threads=3, inter_op_threads=4)
    assert config.task_settings(TaskId("worker", 0)) == C.TaskSettings(
        gpus=(), gpu_memory_growth=True, intra_op_threads=2, inter_op_threads=4)
    assert config.task_settings(TaskId("evaluator", 0)) == C.TaskSettings(gpu_memory_growth=True, inter_op_threads=4)
    assert config.session == C.SessionConfig(log_device_placement=True, operation_timeout_ms=5000)
    assert config.evaluation.export == "best"


def test_overrides_replace_paths(write_yaml, tmp_path):
    config = load_config(write_yaml("cluster: {chief: ['localhost:2222']}\n"), model_dir=str(tmp_path / "m"))
    assert config.model_dir == str(tmp_path / "m")


def test_shipped_configs_are_valid():
    paths = sorted((REPO / "config").glob("*.yaml")) + sorted((REPO / "docs" / "examples").glob("*.yaml"))
    strategies = {load_config(path).strategy.name for path in paths}
    assert strategies == set(C.STRATEGIES)  # one ready example per strategy


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("command", ["launch", "validate"])
def test_cli_rejects_bad_files_with_exit_2_and_starts_nothing(name, command, tmp_path, monkeypatch, capsys):
    """In-process: the CLI's own main(); tests/process/test_cli.py runs each command once as a real process."""
    monkeypatch.chdir(tmp_path)
    assert cli.main([command, "--cluster", str(BAD / name)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("estimator-mnist: error: "), lines
    assert re.search(EXPECTED[name], lines[0])
    assert not (tmp_path / "runs").exists()  # nothing was started or created


def test_a_float_in_exponent_notation_is_a_number(write_yaml):
    """YAML 1.1 (PyYAML) reads 1e-3 as a string; the config reads it as the number every user means."""
    config = load_config(write_yaml("cluster: {chief: ['localhost:2222']}\nmodel: {learning_rate: 1e-3}\n"))
    assert config.model.learning_rate == 0.001


def test_a_path_that_cannot_be_resolved_is_one_line(write_yaml, tmp_path):
    """Found by the fuzzing: a symlink loop made Path.resolve raise RuntimeError, a traceback."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UsageError, match=r"model_dir '.*loop/model' cannot be used as a path \(.*\); choose another"):
        load_config(write_yaml(f"cluster: {{chief: ['localhost:2222']}}\nmodel_dir: {tmp_path}/loop/model\n"))


@pytest.mark.parametrize("key, value", [("run_dir", "s3://bucket/runs"), ("data_dir", "hdfs://namenode/data"),
                                        ("model_dir", "file:///tmp/model"), ("model_dir", "s3://bucket/run")])
def test_a_url_of_another_scheme_is_refused_naming_the_key_and_gs(write_yaml, key, value, tmp_path, monkeypatch):
    """Path(...).resolve() made s3://bucket/run the local folder <cwd>/s3:/bucket/run on each host."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as error:
        load_config(write_yaml(f"cluster: {{chief: ['localhost:2222']}}\n{key}: {value}\n"))
    assert str(error.value).endswith(ERR_SCHEME.format(file="", key=key, path=value, scheme=value.split(":")[0])[2:])
    assert not list(tmp_path.glob("*:"))


@pytest.mark.parametrize("key", ["run_dir", "data_dir"])
def test_a_bucket_is_refused_where_only_a_local_path_works(write_yaml, key, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=rf"{key} 'gs://bk1/x' is a gs:// URL, but {key} is .*; give a local path"):
        load_config(write_yaml(f"cluster: {{chief: ['localhost:2222']}}\n{key}: gs://bk1/x\n"))
    assert not list(tmp_path.glob("*:"))


@pytest.mark.parametrize("value, kept", [("gs://my-bucket/runs/mnist", "gs://my-bucket/runs/mnist"),
                                         ("gs://my-bucket/runs/mnist/", "gs://my-bucket/runs/mnist"),
                                         ("gs://my-bucket", "gs://my-bucket")])
def test_model_dir_may_be_a_bucket_and_stays_a_url(write_yaml, value, kept, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(write_yaml(f"cluster: {{chief: ['localhost:2222']}}\nmodel_dir: {value}\n"))
    assert config.model_dir == kept
    assert not list(tmp_path.glob("*:")) and not (tmp_path / "my-bucket").exists()


@pytest.mark.parametrize("value, why", [("gs://", "no bucket"), ("gs:///x", "no bucket"),
                                        ("gs://Bad_Bucket/x", "'Bad_Bucket' is no valid bucket name"),
                                        ("gs://bk1/a/../x", "an empty, '.' or '..' part"),
                                        ("gs://bk1/a//x", "an empty, '.' or '..' part")])
def test_a_bucket_url_that_names_no_bucket_is_refused(write_yaml, value, why):
    with pytest.raises(UsageError) as error:
        load_config(write_yaml(f"cluster: {{chief: ['localhost:2222']}}\nmodel_dir: '{value}'\n"))
    assert str(error.value).endswith(ERR_BUCKET.format(file="", key="model_dir", path=value, why=why)[2:])


@pytest.mark.parametrize("key", ["model_dir", "run_dir", "data_dir"])
@pytest.mark.parametrize("value, scheme", [("gs:/b/x", "gs"), ("gs:b/x", "gs"), ("s3:/b/m", "s3"), ("GS:/b", "GS"),
                                           ("foo:/x", "foo")])
def test_a_string_that_looks_like_a_url_but_is_none_is_refused(write_yaml, key, value, scheme, tmp_path, monkeypatch):
    """Never a local folder named after a scheme: gs:/b/x would have trained into ./gs:/b/x (issue 57)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as error:
        load_config(write_yaml(f"cluster: {{chief: ['localhost:2222']}}\n{key}: '{value}'\n"))
    assert str(error.value).endswith(ERR_MALFORMED.format(file="", key=key, path=value, scheme=scheme)[2:])
    assert not list(tmp_path.glob("*:"))


def test_a_url_given_as_a_flag_is_checked_too(write_yaml):
    with pytest.raises(UsageError, match=r"model_dir 's3://b/m' is a s3:// URL"):
        load_config(write_yaml("cluster: {chief: ['localhost:2222']}\n"), model_dir="s3://b/m")
    config = load_config(write_yaml("cluster: {chief: ['localhost:2222']}\n"), model_dir="gs://bk1/m")
    assert config.model_dir == "gs://bk1/m"


def test_a_colon_inside_a_local_path_is_no_url(write_yaml, tmp_path):
    config = load_config(write_yaml(f"cluster: {{chief: ['localhost:2222']}}\nmodel_dir: {tmp_path}/a:b/model\n"))
    assert config.model_dir == f"{tmp_path}/a:b/model"


@pytest.mark.parametrize("command", ["validate", "train"])
def test_an_s3_model_dir_is_one_line_and_exit_2_and_makes_no_local_folder(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    (tmp_path / "c.yaml").write_text("cluster: {chief: ['localhost:2222']}\nmodel_dir: s3://bucket/run\n")
    assert cli.main([command, "--cluster", "c.yaml"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "model_dir 's3://bucket/run' is a s3:// URL" in lines[0], lines
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"]  # no s3: folder, no runs/


def test_a_merge_may_still_be_overridden_key_by_key(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("x: &defaults {max_steps: 10, save_checkpoints_steps: 5}\n"
                    "training: {<<: *defaults, max_steps: 20}\ncluster: {chief: ['localhost:2222']}\n")
    from estimator_mnist.config import read_yaml  # pylint: disable=import-outside-toplevel
    assert read_yaml(path)["training"] == {"max_steps": 20, "save_checkpoints_steps": 5}
