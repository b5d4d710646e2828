"""Strategies, devices and session settings built from the YAML, one task at a time."""

import json
import re
import time

import pytest
import tensorflow as tf

from tests.helpers import planned
from estimator_mnist.tf_task import strategy as S
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.config.schema import ModelConfig
from estimator_mnist.errors import UsageError
from estimator_mnist.tf_task.model import model_fn
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.plan.topology import build_tf_config

PS_CLUSTER = {"chief": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"], "ps": ["localhost:2225"],
              "evaluator": "localhost"}


def plan(config, task):
    return plan_task(config, task, cores=2, cpu_bfloat16=False, environ={})


def session_proto(config, task, precision="float32"):
    return S.session_config(config, planned(config, task, precision, cores=2, cpu_bfloat16=False, environ={}))


def strategy_for(config, task):
    return S.build_train_strategy(config, plan(config, task))


def make_config(cluster=None, **data):
    return config_from_dict({"cluster": cluster or {"chief": ["localhost:2222"], "evaluator": "localhost"}, **data},
                            "test.yaml")


def test_session_config_carries_every_task_setting():
    config = make_config(
        {"chief": ["localhost:2222"], "worker": ["localhost:2223"]},
        session={"log_device_placement": True, "operation_timeout_ms": 1500},
        tasks={"worker:0": {"intra_op_threads": 3, "inter_op_threads": 5, "gpu_memory_growth": True,
                            "gpu_memory_fraction": 0.25}})
    proto = session_proto(config, TaskId("worker", 0))
    assert proto.intra_op_parallelism_threads == 3
    assert proto.inter_op_parallelism_threads == 5
    assert proto.log_device_placement is True
    assert proto.operation_timeout_in_ms == 1500
    assert proto.gpu_options.allow_growth is True
    assert proto.gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.25)
    assert list(proto.device_filters) == []
    chief = session_proto(config, TaskId("chief", 0))
    assert chief.gpu_options.allow_growth is False and chief.gpu_options.per_process_gpu_memory_fraction == 0


def test_cpu_flags_tell_bfloat16(tmp_path):
    with_bf16 = tmp_path / "bf16"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_tile\n")
    without = tmp_path / "plain"
    without.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")
    from estimator_mnist.plan.cpu import cpu_has_bfloat16

    assert cpu_has_bfloat16(str(with_bf16)) and not cpu_has_bfloat16(str(without))
    assert not cpu_has_bfloat16(str(tmp_path / "missing"))


def test_bfloat16_turns_off_the_fusion_that_has_no_bfloat16_kernel():
    from tensorflow.core.protobuf import rewriter_config_pb2

    off = rewriter_config_pb2.RewriterConfig.OFF
    bf16 = session_proto(make_config(), TaskId("chief", 0), "mixed_bfloat16")
    assert bf16.graph_options.rewrite_options.remapping == off
    fp32 = session_proto(make_config(), TaskId("chief", 0), "float32")
    assert fp32.graph_options.rewrite_options.remapping != off
    evaluator = session_proto(make_config(), TaskId("evaluator", 0), "mixed_bfloat16")
    assert evaluator.graph_options.rewrite_options.remapping != off  # it evaluates in float32 by default
    bfloat16_evaluator = session_proto(make_config(evaluation={"precision": "training"}), TaskId("evaluator", 0),
                                       "mixed_bfloat16")
    assert bfloat16_evaluator.graph_options.rewrite_options.remapping == off


def test_sync_ps_workers_only_talk_to_the_ps_tasks_and_themselves():
    config = make_config(PS_CLUSTER, strategy={"name": "parameter_server_sync", "replicas_to_aggregate": 2})
    assert list(session_proto(config, TaskId("worker", 1)).device_filters) == ["/job:ps", "/job:worker/task:1"]
    assert list(session_proto(config, TaskId("chief", 0)).device_filters) == ["/job:ps", "/job:chief/task:0"]
    assert list(session_proto(config, TaskId("ps", 0)).device_filters) == []
    assert plan(make_config(PS_CLUSTER, strategy="parameter_server_sync"), TaskId("chief", 0)).sync_replicas == (3, 3)


def test_operation_timeout_fails_a_blocked_op_instead_of_hanging():
    config = make_config(session={"operation_timeout_ms": 300})
    with tf.Graph().as_default():
        queue = tf.queue.FIFOQueue(1, tf.float32)
        dequeue = queue.dequeue()  # nothing is ever enqueued
        with tf.compat.v1.Session(config=session_proto(config, TaskId("chief", 0))) as session:
            started = time.monotonic()
            with pytest.raises(tf.errors.DeadlineExceededError):
                session.run(dequeue)
            assert time.monotonic() - started < 30


@pytest.mark.parametrize("name, expected", [
    ("parameter_server", "ParameterServerStrategyV1"),
    ("one_device", "OneDeviceStrategyV1"),
])
def test_strategy_class_per_name(name, expected, monkeypatch):
    cluster = PS_CLUSTER if name.startswith("parameter") else None
    config = make_config(cluster, strategy=name)
    monkeypatch.setenv("TF_CONFIG", json.dumps(build_tf_config(config.cluster, TaskId("chief", 0))))
    strategy = strategy_for(config, TaskId("chief", 0))
    assert type(strategy).__name__ == expected
    assert strategy.num_replicas_in_sync == 1
    assert strategy_for(config, TaskId("evaluator", 0)) is None


def test_sync_ps_runs_without_a_strategy_object():
    config = make_config(PS_CLUSTER, strategy="parameter_server_sync")
    assert strategy_for(config, TaskId("worker", 0)) is None


def test_mirrored_replicates_over_the_devices_given():
    # conftest gives this process two logical CPUs.
    config = make_config(strategy={"name": "mirrored", "devices": ["/cpu:0", "/cpu:1"]})
    strategy = strategy_for(config, TaskId("chief", 0))
    assert strategy.num_replicas_in_sync == 2
    assert isinstance(strategy.extended._cross_device_ops, tf.distribute.ReductionToOneDevice)
    assert session_proto(config, TaskId("chief", 0)).device_count["CPU"] == 2
    default = strategy_for(make_config(strategy="mirrored"), TaskId("chief", 0))
    assert default.num_replicas_in_sync == 1  # no GPU here: /cpu:0 alone


def test_mirrored_refuses_a_device_this_process_does_not_have():
    config = make_config(strategy={"name": "mirrored", "devices": ["/cpu:0", "/cpu:7"]})
    with pytest.raises(UsageError, match=re.escape("task chief:0: strategy devices lists /cpu:7 but this process has "
                                                   "only 2 CPU device(s)")):
        strategy_for(config, TaskId("chief", 0))


def test_nccl_on_a_task_without_gpus_is_refused_when_it_starts():
    config = make_config({"chief": ["localhost:2222"], "worker": ["localhost:2223"]},
                         strategy={"name": "multi_worker_mirrored", "communication": "nccl"})
    with pytest.raises(UsageError, match=r"^task worker:0: strategy\.communication is nccl but this process sees no GPU"):
        strategy_for(config, TaskId("worker", 0))


def test_sync_ps_model_fn_wraps_the_optimizer_and_adds_its_hook():
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        features = {"image": tf.random.uniform([8, 28, 28, 1])}
        labels = tf.constant([0, 1, 2, 3, 4, 5, 6, 7], tf.int64)
        params = {"config": ModelConfig(), "batch_size_per_replica": 8, "max_steps": 10, "sync_replicas": (2, 3)}
        spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, params,
                        config=tf.estimator.RunConfig())
        hooks = list(spec.training_hooks)
        assert [type(h).__name__ for h in hooks] == ["_SyncReplicasOptimizerHook", "ReleaseSyncTokensHook"]
        names = {op.name for op in tf.compat.v1.get_default_graph().get_operations()}
        assert "sync_token_q" in names  # the token queue that holds replicas to the aggregated step
        plain = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, dict(params, sync_replicas=None))
        assert list(plain.training_hooks) == []


def test_the_coordination_service_s_heartbeat_timeout_outlasts_a_suspended_job(monkeypatch):
    """TF's default (10 s, by the wall clock) failed every trainer of a Slurm job suspended past it."""
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel

    tf_config = {"cluster": {"chief": ["n1:2222"], "worker": ["n2:2222", "n3:2222"]}, "task": {"type": "worker",
                                                                                          "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    monkeypatch.setattr(context.context(), "_coordination_service_config", None)
    S.configure_coordination_service()
    service = context.context().coordination_service
    assert service.heartbeat_timeout_in_ms == S.COORDINATION_HEARTBEAT_TIMEOUT_MS >= 7 * 24 * 3600 * 1000
    assert service.service_type == "standalone" and service.service_leader == "/job:chief/replica:0/task:0"
    assert [(j.name, j.num_tasks) for j in service.coordinated_job_list] == [("chief", 1), ("worker", 2)]
    S.configure_coordination_service()  # kept: the strategy's own configure leaves it too
    assert context.context().coordination_service is service
