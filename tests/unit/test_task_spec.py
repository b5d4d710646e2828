"""The TaskSpec: resolved once, frozen, versioned, and the same value on both sides of every process boundary."""

import dataclasses
import json

import pytest

from estimator_mnist import cli, commands
from estimator_mnist.config import TaskId, config_from_dict, load_config
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.plan.task_spec import ERR_SPEC, SPEC_FORMAT, TaskSpec, read_spec, spec_from_json
from estimator_mnist.tf_task.__main__ import SPEC_SOURCE, main, set_tf_config

CLUSTER = {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"], "evaluator": "localhost"}
CONFIGS = {
    "the default cluster": lambda: load_config("config/local.yaml"),
    "sync ps with per-task settings": lambda: config_from_dict({
        "cluster": CLUSTER, "strategy": {"name": "parameter_server_sync", "replicas_to_aggregate": 1},
        "tasks": {"all": {"gpus": [], "intra_op_threads": 2}, "worker:0": {"gpus": [0, 1], "gpu_memory_fraction": 0.5}},
        "evaluation": {"nice": 5, "precision": "training"}, "model": {"precision": "auto"}}, "t.yaml"),
    "mirrored over two CPUs": lambda: config_from_dict({
        "cluster": {"chief": ["localhost:1"]}, "strategy": {"name": "mirrored", "devices": ["/cpu:0", "/cpu:1"]}},
        "t.yaml"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_task_s_spec_survives_its_text_form_unchanged(name):
    config = CONFIGS[name]()
    for task in config.cluster.tasks():
        spec = TaskSpec(config=config, plan=plan_task(config, task, cores=4), notes=("a note",))
        text = spec.to_json()
        assert "\n" not in text and json.loads(text)["format"] == SPEC_FORMAT
        assert spec_from_json(text, "s.json") == spec


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not JSON"),
    ("[]", "format 'list'"),
    ('{"format": 0}', "format 0"),
    (json.dumps({"format": SPEC_FORMAT, "config": {}, "plan": {}, "stray": 1}), "unknown field"),
    (json.dumps({"format": SPEC_FORMAT, "config": {"cluster": {}}}), "missing"),
])
def test_anything_but_a_spec_is_one_line_naming_its_source(text, problem):
    with pytest.raises(UsageError, match=problem) as caught:
        spec_from_json(text, "chief-0.spec.json")
    assert str(caught.value).startswith("chief-0.spec.json: not a TaskSpec") and "\n" not in str(caught.value)


def test_an_unreadable_spec_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="cannot read the TaskSpec"):
        read_spec(str(tmp_path / "missing.spec.json"))
    assert ERR_SPEC.startswith("{source}")


def test_the_tensorflow_process_sets_the_spec_s_tf_config_and_only_that():
    config = load_config("config/local.yaml")
    environ = {"TF_CONFIG": "what the caller had"}
    set_tf_config(TaskSpec(config, plan_task(config, TaskId("worker", 0), cores=2)), environ)
    assert json.loads(environ["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}
    one = config_from_dict({"cluster": {"chief": ["localhost:1"]}, "strategy": "one_device"}, "t.yaml")
    set_tf_config(TaskSpec(one, plan_task(one, TaskId("chief", 0), cores=2)), environ)
    assert "TF_CONFIG" not in environ  # one process, no cluster


def test_a_setting_crosses_from_the_yaml_to_the_tensorflow_process_only_inside_the_spec(tmp_path, monkeypatch):
    """`train` resolves --set once; the text it hands over carries it; the child's value is the parent's."""
    monkeypatch.setenv("TF_CONFIG", "{broken")  # ignored: --task was given, and the child never reads it
    args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--task", "worker:0",
                                          "--set", "training.batch_size_per_replica=24", "--set", "model.precision=float32",
                                          "--model-dir", str(tmp_path / "m")])
    spec = commands.resolve(args).spec(cpu_set=(0, 1))
    child = spec_from_json(spec.to_json(), SPEC_SOURCE)
    assert child == spec and child.config.training.batch_size_per_replica == 24 and child.plan.precision == "float32"


def test_the_tensorflow_process_refuses_anything_but_a_spec(capsys):
    class Stdin:
        @staticmethod
        def read():
            return "cluster: {chief: [localhost:1]}"  # YAML is not a spec

    assert main(["--ready-fd", "9"], stdin=Stdin) == 2
    assert capsys.readouterr().err.startswith(f"estimator-mnist: error: {SPEC_SOURCE}: not a TaskSpec")
    with pytest.raises(SystemExit):
        main(["--ready-fd", "9", "--cluster", "config/local.yaml"], stdin=Stdin)  # no other flag exists


def test_train_takes_a_spec_alone(tmp_path, capsys):
    assert cli.main(["train", "--spec", str(tmp_path / "s.json"), "--task", "chief:0"]) == 2
    assert "takes no other input flags (got --task)" in capsys.readouterr().err



def test_the_process_table_names_each_task():
    from tests.process_table import task_of_command  # pylint: disable=import-outside-toplevel

    assert task_of_command(["python", "-m", "estimator_mnist", "train", "--spec", "/r/logs/1/worker-1.spec.json"]) \
        == "worker:1"
    assert task_of_command(["estimator-mnist", "train", "--cluster", "c.yaml", "--task", "ps:0"]) == "ps:0"
    assert task_of_command(["python", "-m", "estimator_mnist.tf_task", "--ready-fd", "5"]) is None


def test_launch_and_train_by_hand_make_the_same_spec(tmp_path):
    """The spec `launch` writes for each task is the one `train --cluster --task` resolves on the same machine."""
    from estimator_mnist.supervise.launch.group import TaskGroup  # pylint: disable=import-outside-toplevel

    config = load_config("config/local.yaml", ("training.max_steps=250",))
    group = TaskGroup(config, tmp_path)
    for task in config.cluster.tasks():
        args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--task", str(task),
                                              "--set", "training.max_steps=250"])
        # The one difference: launch's spec says its Supervisor watches the task (a stopped process, once).
        assert dataclasses.replace(commands.resolve(args).spec(), launched=True) == group.specs[task]
