"""train's cluster from TF_CONFIG exactly as Kubeflow's training-operator v1.9 writes it, or from neither."""

import json
import os
from unittest import mock

import pytest

from estimator_mnist import cli, commands
from estimator_mnist.config import TaskId
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.task_plan import describe, plan_task
from estimator_mnist.plan.single_process_source import ERR_NO_TASK
from estimator_mnist.plan.tf_config_source import read_tf_config


def operator_tf_config(job, replicas, task, index, namespace="default", port=2222):
    """What genClusterSpec writes: every replica type, lower-cased, <job>-<type>-<index>.<ns>.svc:<port>."""
    cluster = {kind.lower(): [f"{job}-{kind.lower()}-{i}.{namespace}.svc:{port}" for i in range(count)]
               for kind, count in replicas.items()}
    return json.dumps({"cluster": cluster, "task": {"type": task, "index": index}, "environment": "cloud"})


def train_args(tmp_path, *extra, yaml_text="training: {max_steps: 7, save_checkpoints_steps: 7}\n"):
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(yaml_text)
    return cli.build_parser().parse_args(["train", "--cluster", str(yaml_file), "--model-dir", str(tmp_path / "m"),
                                          *extra])


def config_and_task(args, tf_config):
    env = {"TF_CONFIG": tf_config} if tf_config is not None else {}
    with mock.patch.dict(os.environ, env, clear=False):
        if tf_config is None:
            os.environ.pop("TF_CONFIG", None)
        resolved = commands.resolve(args)
    source = resolved.source
    return resolved.config, source.task, source.tf_config, source.gpus_from_manager, (source.note,) if source.note else ()


def test_the_operator_s_tf_config_keeps_the_evaluator_in_the_product_s_view_only(tmp_path):
    text = operator_tf_config("mnist", {"Chief": 1, "Worker": 1, "Evaluator": 1}, "worker", 0)
    config, task, tf_config, operator, notes = config_and_task(
        train_args(tmp_path, "--set", "model.learning_rate=1e-4"), text)
    assert task == TaskId("worker", 0) and operator and notes == ()
    assert config.training.max_steps == 7 and config.model.learning_rate == 0.0001
    assert config.cluster.evaluator == "mnist-evaluator-0.default.svc"  # who evaluates, and checkpoint retention
    assert [str(a) for a in config.cluster.chief] == ["mnist-chief-0.default.svc:2222"]
    # TensorFlow gets no evaluator in its training cluster (MultiWorkerMirrored fails with one).
    assert tf_config["cluster"] == {"chief": ["mnist-chief-0.default.svc:2222"],
                                    "worker": ["mnist-worker-0.default.svc:2222"]}
    plan = plan_task(config, task, tf_config, gpus_from_manager=operator, cores=2, cpu_bfloat16=False)
    assert plan.tf_config == tf_config and not plan.waits_for_evaluation
    chief = plan_task(config, TaskId("chief", 0), None, cores=2, cpu_bfloat16=False)
    assert chief.waits_for_evaluation  # the chief waits for the final evaluation: the evaluator exists


def test_workers_only_with_an_evaluator_and_a_legacy_master(tmp_path):
    text = operator_tf_config("j", {"Worker": 2, "Evaluator": 1}, "evaluator", 0)
    config, task, tf_config, _, _ = config_and_task(train_args(tmp_path), text)
    assert task.is_evaluator and config.cluster.chief_task == TaskId("worker", 0)
    assert tf_config["cluster"] == {"chief": ["j-worker-0.default.svc:2222"], "worker": ["j-worker-1.default.svc:2222"]}
    text = operator_tf_config("j", {"Master": 1, "Worker": 1, "PS": 1}, "master", 0)
    config, task, tf_config, _, _ = config_and_task(train_args(tmp_path, yaml_text="strategy: parameter_server\n"),
                                                    text)
    assert task == TaskId("chief", 0) and set(tf_config["cluster"]) == {"chief", "worker", "ps"}


def test_the_yaml_cluster_is_ignored_with_a_note(tmp_path):
    args = train_args(tmp_path, yaml_text="cluster: {chief: ['localhost:1'], worker: ['localhost:2']}\n")
    config, _, _, _, notes = config_and_task(args, operator_tf_config("j", {"Chief": 1, "Worker": 2}, "chief", 0))
    assert len(config.cluster.worker) == 2 and notes and "cluster section of the YAML is ignored" in notes[0]


def test_gpus_count_the_pod_s_gpus_under_the_operator(tmp_path):
    args = train_args(tmp_path, "--set", "tasks.worker.gpus=[2,3]")
    config, task, tf_config, operator, _ = config_and_task(
        args, operator_tf_config("j", {"Chief": 1, "Worker": 1}, "worker", 0))
    plan = plan_task(config, task, tf_config, gpus_from_manager=operator, cores=2, cpu_bfloat16=False)
    assert "CUDA_VISIBLE_DEVICES" not in dict(plan.env)
    assert "gpus=2 (Kubernetes or Slurm: the pod's or Slurm task's own GPUs" in describe(plan)
    by_hand = plan_task(config, task, tf_config, cores=2, cpu_bfloat16=False)
    assert dict(by_hand.env)["CUDA_VISIBLE_DEVICES"] == "2,3"


@pytest.mark.parametrize("yaml_text", ["training: {max_steps: 7, save_checkpoints_steps: 7}\n",
                                       "cluster: {chief: ['localhost:2300']}\nstrategy: multi_worker_mirrored\n",
                                       "cluster: {worker: ['localhost:2300'], evaluator: localhost}\n"])
def test_no_tf_config_and_one_trainer_is_a_single_process_job(tmp_path, yaml_text):
    config, task, tf_config, operator, notes = config_and_task(train_args(tmp_path, yaml_text=yaml_text), None)
    assert task == TaskId("chief", 0) and tf_config is None and not operator
    assert config.strategy.name in ("one_device", "mirrored") and config.cluster.evaluator is None
    plan = plan_task(config, task, tf_config, cores=2, cpu_bfloat16=False)
    assert plan.in_graph and plan.evaluates_itself and plan.tf_config is None


def test_no_tf_config_and_several_trainers_names_task_and_tf_config(tmp_path):
    with pytest.raises(UsageError, match=r"local\.yaml: the cluster has 3 tasks \(chief:0, worker:0, evaluator:0\), "
                                         r"so train needs to know which one this is: pass --task TYPE:INDEX, or set "
                                         r"TF_CONFIG") as caught:
        config_and_task(cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml"]), None)
    assert "\n" not in str(caught.value) and ERR_NO_TASK.split("{")[0] == ""


@pytest.mark.parametrize("text, pattern", [
    ("{not json", r"TF_CONFIG is not valid JSON"),
    ("[1, 2]", r"TF_CONFIG is not a JSON object"),
    ('{"task": {"type": "worker"}}', r"has no \"cluster\" object"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "boss", "index": 0}}', r"has no valid task\.type"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}}', r"task\.index -1"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}', r"no cluster with a chief or workers"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}', r"names task worker:3"),
    ('{"cluster": {"worker": ["a:1"], "launcher": ["b:1"]}, "task": {"type": "worker"}}', r"cluster role\(s\) launcher"),
    ('{"cluster": {"worker": "a:1"}, "task": {"type": "worker"}}', r"cluster\.worker 'a:1', not a list"),
    ('{"cluster": {"master": ["a:1"], "chief": ["b:1"]}, "task": {"type": "chief"}}', r"both a master and a chief"),
])
def test_a_tf_config_the_product_cannot_run_is_one_line(text, pattern):
    with pytest.raises(UsageError, match=pattern) as caught:
        read_tf_config(text)
    assert "\n" not in str(caught.value)


def test_a_bad_host_in_tf_config_is_named_with_exit_2(tmp_path, capsys):
    text = json.dumps({"cluster": {"worker": ["no port here"]}, "task": {"type": "worker", "index": 0}})
    with mock.patch.dict(os.environ, {"TF_CONFIG": text}):
        code = cli.main(["train", "--model-dir", str(tmp_path / "m")])
    assert code == 2 and "TF_CONFIG" in capsys.readouterr().err
