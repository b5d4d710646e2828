"""One plan per task: environment, threads, precision, in-graph or not, TF_CONFIG, from (config, task) alone."""

import os

import pytest

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.plan.task_plan import PRIVATE_UMASK, apply_to_this_process, describe, plan_task

CLUSTER = {"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"], "evaluator": "localhost"}
CHIEF, WORKER0, WORKER1, EVALUATOR = TaskId("chief", 0), TaskId("worker", 0), TaskId("worker", 1), TaskId("evaluator", 0)


def make(cluster=CLUSTER, **data):
    return config_from_dict({"cluster": cluster, **data}, "t.yaml")


def plan(config, task, **facts):
    return plan_task(config, task, cores=facts.pop("cores", 2), cpu_bfloat16=facts.pop("cpu_bfloat16", False),
                     environ=facts.pop("environ", {}), **facts)


def env(p):
    return dict(p.env)


def test_gpus_become_the_task_s_cuda_mask_and_none_inherits():
    config = make(tasks={"worker": {"gpus": [2, 3]}, "worker:1": {"gpus": [1]}, "evaluator": {"gpus": []}})
    assert "CUDA_VISIBLE_DEVICES" not in env(plan(config, CHIEF))
    assert env(plan(config, WORKER0))["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env(plan(config, WORKER1))["CUDA_VISIBLE_DEVICES"] == "1"
    assert env(plan(config, EVALUATOR))["CUDA_VISIBLE_DEVICES"] == "-1"  # [] hides every GPU
    assert not any(key == "CUDA_VISIBLE_DEVICES" for key, _ in plan(config, CHIEF).env)  # the inherited one stays


def test_placement_logging_needs_the_info_log_level():
    loud = make(session={"log_device_placement": True})
    assert env(plan(loud, WORKER0, environ={"TF_CPP_MIN_LOG_LEVEL": "3"}))["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert env(plan(make(), WORKER0))["TF_CPP_MIN_LOG_LEVEL"] == "1"
    assert env(plan(make(), WORKER0, environ={"TF_CPP_MIN_LOG_LEVEL": "2"}))["TF_CPP_MIN_LOG_LEVEL"] == "2"


def test_onednn_is_on_for_every_x86_cpu_unless_the_user_exported_otherwise():
    # TF 2.15 turns it on by itself only on CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX.
    assert env(plan(make(), WORKER0, x86=True))["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert env(plan(make(), EVALUATOR, x86=True))["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert env(plan(make(), WORKER0, x86=True, environ={"TF_ENABLE_ONEDNN_OPTS": "0"}))["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert "TF_ENABLE_ONEDNN_OPTS" not in env(plan(make(), WORKER0, x86=False))  # ARM: TensorFlow's own choice
    assert "TF_ENABLE_ONEDNN_OPTS='1'" in describe(plan(make(), WORKER0, x86=True))


def test_auto_threads_split_the_cores_between_the_trainers_of_one_machine():
    config = make()
    assert (plan(config, CHIEF, cores=6).intra_op_threads, plan(config, CHIEF, cores=6).inter_op_threads) == (2, 2)
    assert plan(config, WORKER0, cores=2).intra_op_threads == 1
    evaluator = plan(config, EVALUATOR, cores=8)
    assert (evaluator.intra_op_threads, evaluator.inter_op_threads) == (8, 1)
    other_hosts = make({"chief": ["a:1"], "worker": ["b:1"]})
    assert plan(other_hosts, CHIEF, cores=4).intra_op_threads == 4
    ps = make({"chief": ["localhost:1"], "ps": ["localhost:2"]}, strategy="parameter_server")
    assert (plan(ps, TaskId("ps", 0)).intra_op_threads, plan(ps, TaskId("ps", 0)).inter_op_threads) == (1, 2)
    explicit = make(tasks={"worker:1": {"intra_op_threads": 3, "inter_op_threads": 0}})
    assert (plan(explicit, WORKER1).intra_op_threads, plan(explicit, WORKER1).inter_op_threads) == (3, 0)


@pytest.mark.parametrize("setting, bf16, gpus, capabilities, expected", [
    ("auto", True, None, [], "mixed_bfloat16"),
    ("auto", False, None, [], "float32"),
    ("auto", True, None, [(8, 0)], "mixed_float16"),
    ("auto", True, None, [(8, 0), (6, 1)], "float32"),  # an old GPU computes float16 slowly
    ("auto", True, [], [(8, 0)], "mixed_bfloat16"),     # no GPU can show up: decided without TensorFlow
    ("float32", True, None, [(8, 0)], "float32"),
    ("mixed_float16", False, None, [], "mixed_float16"),
])
def test_precision_is_resolved_once_from_the_cpu_and_the_gpus(setting, bf16, gpus, capabilities, expected):
    config = make(model={"precision": setting}, tasks={"all": {"gpus": gpus}} if gpus is not None else None)
    task_plan = plan(config, WORKER0, cpu_bfloat16=bf16)
    resolved = task_plan.with_precision(capabilities)
    assert resolved.precision == expected and resolved.evaluation_precision == "float32"
    assert task_plan.precision == (expected if gpus == [] or setting != "auto" else "auto")
    assert resolved.with_precision([(6, 1)]) == resolved  # once resolved, it stays


def test_between_graph_tasks_get_the_yaml_cluster_as_tf_config():
    tf_config = plan(make(), WORKER1).tf_config
    assert tf_config == {"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]},
                         "task": {"type": "worker", "index": 1}}
    given = {"cluster": {"worker": ["w0:1"]}, "task": {"type": "worker", "index": 0}}
    assert plan(make(), WORKER0, tf_config=given).tf_config == given


@pytest.mark.parametrize("evaluator, evaluates_itself", [(True, False), (False, True)])
def test_in_graph_strategies_run_without_a_cluster(evaluator, evaluates_itself):
    cluster = {"chief": ["localhost:1"], **({"evaluator": "localhost"} if evaluator else {})}
    config = make(cluster, strategy={"name": "mirrored", "devices": ["/cpu:0", "/cpu:1"]})
    chief = plan(config, CHIEF)
    assert chief.in_graph and chief.tf_config is None and chief.logical_cpus == 2
    assert chief.evaluates_itself is evaluates_itself and chief.is_chief
    if evaluator:
        assert not plan(config, EVALUATOR).in_graph and plan(config, EVALUATOR).logical_cpus == 1


def test_sync_ps_plans_its_replicas_and_only_the_evaluator_is_niced():
    config = make({"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"], "ps": ["localhost:4"],
                   "evaluator": "localhost"}, strategy={"name": "parameter_server_sync", "replicas_to_aggregate": 2})
    assert plan(config, WORKER0).sync_replicas == (2, 3)
    assert plan(make(), WORKER0).sync_replicas is None
    assert plan(config, EVALUATOR).nice == "idle" and plan(config, WORKER0).nice is None
    assert plan(config, WORKER0).umask == PRIVATE_UMASK


def test_planning_changes_nothing_and_applying_sets_env_but_no_tf_config(monkeypatch):
    config = make(tasks={"worker:1": {"gpus": [1]}})
    before = dict(os.environ)
    task_plan = plan_task(config, WORKER1, x86=True, environ={})
    assert dict(os.environ) == before
    for name in ("CUDA_VISIBLE_DEVICES", "TF_CPP_MIN_LOG_LEVEL", "PYTHONUNBUFFERED", "TF_ENABLE_ONEDNN_OPTS"):
        monkeypatch.delenv(name, raising=False)  # restored after the test, as is TF_CONFIG
    monkeypatch.setenv("TF_CONFIG", "stale")
    old_umask = os.umask(0o022)
    try:
        assert apply_to_this_process(task_plan) == "unchanged"
        assert os.umask(0o022) == PRIVATE_UMASK
    finally:
        os.umask(old_umask)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1" and os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert os.environ["TF_CONFIG"] == "stale"  # only the TensorFlow process sets one, from its TaskSpec
    assert "CUDA_VISIBLE_DEVICES='1'" in describe(task_plan) and "umask=027" in describe(task_plan)


def test_trainers_sharing_a_machine_each_get_their_share_of_its_cores():
    two = make({"chief": ["localhost:1"], "worker": ["localhost:2"], "evaluator": "localhost"})
    assert [plan(two, t, cpu_set=(0, 1)).cpus for t in (CHIEF, WORKER0)] == [(0,), (1,)]
    assert [plan(two, t, cpu_set=(0, 1, 2, 3)).cpus for t in (CHIEF, WORKER0)] == [(0, 1), (2, 3)]
    # A sweep trial or a container gives fewer CPUs: the shares come out of those.
    assert [plan(two, t, cpu_set=(6, 2)).cpus for t in (CHIEF, WORKER0)] == [(2,), (6,)]
    assert plan(two, CHIEF, cpu_set=(0, 1, 2, 3)).intra_op_threads == 2  # auto threads fill the share
    assert "cpus=2,3 intra_op_threads=2" in describe(plan(two, WORKER0, cpu_set=(0, 1, 2, 3)))


@pytest.mark.parametrize("cluster, tasks, task, cpu_set", [
    ({"chief": ["localhost:1"], "evaluator": "localhost"}, {}, CHIEF, (0, 1)),       # alone on its machine
    ({"chief": ["a:1"], "worker": ["b:2"]}, {}, CHIEF, (0, 1)),                      # one trainer per machine
    (CLUSTER, {}, CHIEF, (0, 1)),                                                    # fewer cores than trainers
    ({"chief": ["localhost:1"], "worker": ["localhost:2"]}, {"all": {"pin_cores": False}}, WORKER0, (0, 1)),
    ({"chief": ["localhost:1"], "worker": ["localhost:2"], "evaluator": "localhost"}, {}, EVALUATOR, (0, 1)),
])
def test_no_pinning(cluster, tasks, task, cpu_set):
    task_plan = plan(make(cluster, tasks=tasks), task, cpu_set=cpu_set)
    assert task_plan.cpus is None and "cpus=" not in describe(task_plan)


def test_an_evaluator_beside_trainers_starts_after_them_and_one_elsewhere_at_once():
    assert plan(make(), EVALUATOR).starts_after_trainers
    elsewhere = make({"chief": ["a:1"], "worker": ["b:1"], "evaluator": "c"})
    assert not plan(elsewhere, EVALUATOR).starts_after_trainers
    assert not any(plan(make(), t).starts_after_trainers for t in (CHIEF, WORKER0))


def test_with_a_proxy_set_for_the_bucket_the_peers_are_dialled_directly():
    """TF 2.15's gRPC honours https_proxy: the pods of a TFJob dialled each other through the proxy set for GCS."""
    config = make({"chief": ["mnist-chief-0.default.svc:2222"], "worker": ["mnist-worker-0.default.svc:2222"]})
    env = dict(plan_task(config, WORKER0, environ={"https_proxy": "http://proxy:3128", "no_proxy": "localhost,.lan"}).env)
    assert env["no_grpc_proxy"] == "localhost,.lan,mnist-chief-0.default.svc,mnist-worker-0.default.svc"
    assert "no_grpc_proxy" not in dict(plan_task(config, WORKER0, environ={}).env)  # no proxy: nothing to add
    own = dict(plan_task(config, WORKER0, environ={"http_proxy": "http://p:1", "no_grpc_proxy": "a"}).env)
    assert own["no_grpc_proxy"] == "a,mnist-chief-0.default.svc,mnist-worker-0.default.svc"
