"""Strategies, devices and session settings built from the YAML, one task at a time."""

import json
import re
import subprocess
import sys
import textwrap
import time

import pytest

tf = pytest.importorskip("tensorflow")

from conftest import REPO  # noqa: E402
from estimator_mnist import strategy as S  # noqa: E402
from estimator_mnist.cluster import TaskId, build_tf_config  # noqa: E402
from estimator_mnist.config import config_from_dict  # noqa: E402
from estimator_mnist.errors import UsageError  # noqa: E402
from estimator_mnist.model import model_fn  # noqa: E402
from estimator_mnist.config import ModelConfig  # noqa: E402

PS_CLUSTER = {"chief": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"], "ps": ["localhost:2225"],
              "evaluator": "localhost"}


def make_config(cluster=None, **data):
    return config_from_dict({"cluster": cluster or {"chief": ["localhost:2222"], "evaluator": "localhost"}, **data},
                            "test.yaml")


def test_session_config_carries_every_task_setting():
    config = make_config(
        {"chief": ["localhost:2222"], "worker": ["localhost:2223"]},
        session={"log_device_placement": True, "operation_timeout_ms": 1500},
        tasks={"worker:0": {"intra_op_threads": 3, "inter_op_threads": 5, "gpu_memory_growth": True,
                            "gpu_memory_fraction": 0.25}})
    proto = S.session_config(config, TaskId("worker", 0))
    assert proto.intra_op_parallelism_threads == 3
    assert proto.inter_op_parallelism_threads == 5
    assert proto.log_device_placement is True
    assert proto.operation_timeout_in_ms == 1500
    assert proto.gpu_options.allow_growth is True
    assert proto.gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.25)
    assert list(proto.device_filters) == []
    chief = S.session_config(config, TaskId("chief", 0))
    assert chief.gpu_options.allow_growth is False and chief.gpu_options.per_process_gpu_memory_fraction == 0


def test_auto_threads_split_the_cores_between_trainers_of_one_machine(monkeypatch):
    monkeypatch.setattr(S, "available_cores", lambda: 8)
    config = make_config({"chief": ["localhost:2222"], "worker": ["127.0.0.1:2223", "otherhost:2224"],
                          "ps": ["localhost:2225"], "evaluator": "localhost"}, strategy="parameter_server")
    assert S.thread_settings(config, TaskId("chief", 0)) == (4, 2)  # chief and worker:0 share this machine
    assert S.thread_settings(config, TaskId("worker", 1)) == (8, 2)  # alone on its machine
    assert S.thread_settings(config, TaskId("ps", 0)) == (1, 2)
    assert S.thread_settings(config, TaskId("evaluator", 0)) == (1, 1)


def test_auto_precision_follows_the_cpu(tmp_path, monkeypatch):
    with_bf16 = tmp_path / "bf16"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_tile\n")
    without = tmp_path / "plain"
    without.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")
    from estimator_mnist.cpu import cpu_has_bfloat16

    assert cpu_has_bfloat16(str(with_bf16)) and not cpu_has_bfloat16(str(without))
    assert not cpu_has_bfloat16(str(tmp_path / "missing"))
    monkeypatch.setattr(S, "cpu_has_bfloat16", lambda: True)
    assert S.resolve_precision("auto") == "mixed_bfloat16"
    assert S.resolve_precision("float32") == "float32"
    monkeypatch.setattr(S, "cpu_has_bfloat16", lambda: False)
    assert S.resolve_precision("auto") == "float32"


def test_bfloat16_turns_off_the_fusion_that_has_no_bfloat16_kernel():
    from tensorflow.core.protobuf import rewriter_config_pb2

    off = rewriter_config_pb2.RewriterConfig.OFF
    bf16 = S.session_config(make_config(model={"precision": "mixed_bfloat16"}), TaskId("chief", 0))
    assert bf16.graph_options.rewrite_options.remapping == off
    fp32 = S.session_config(make_config(model={"precision": "float32"}), TaskId("chief", 0))
    assert fp32.graph_options.rewrite_options.remapping != off
    evaluator = S.session_config(make_config(model={"precision": "mixed_bfloat16"}), TaskId("evaluator", 0))
    assert evaluator.graph_options.rewrite_options.remapping != off  # it evaluates in float32


def test_sync_ps_workers_only_talk_to_the_ps_tasks_and_themselves():
    config = make_config(PS_CLUSTER, strategy={"name": "parameter_server_sync", "replicas_to_aggregate": 2})
    assert list(S.session_config(config, TaskId("worker", 1)).device_filters) == ["/job:ps", "/job:worker/task:1"]
    assert list(S.session_config(config, TaskId("chief", 0)).device_filters) == ["/job:ps", "/job:chief/task:0"]
    assert list(S.session_config(config, TaskId("ps", 0)).device_filters) == []
    assert S.sync_replicas(config) == (2, 3)
    assert S.sync_replicas(make_config(PS_CLUSTER, strategy="parameter_server_sync")) == (3, 3)
    assert S.sync_replicas(make_config(PS_CLUSTER, strategy="parameter_server")) is None


def test_operation_timeout_fails_a_blocked_op_instead_of_hanging():
    config = make_config(session={"operation_timeout_ms": 300})
    with tf.Graph().as_default():
        queue = tf.queue.FIFOQueue(1, tf.float32)
        dequeue = queue.dequeue()  # nothing is ever enqueued
        with tf.compat.v1.Session(config=S.session_config(config, TaskId("chief", 0))) as session:
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
    strategy = S.build_train_strategy(config, TaskId("chief", 0))
    assert type(strategy).__name__ == expected
    assert strategy.num_replicas_in_sync == 1
    assert S.build_train_strategy(config, TaskId("evaluator", 0)) is None


def test_sync_ps_runs_without_a_strategy_object():
    config = make_config(PS_CLUSTER, strategy="parameter_server_sync")
    assert S.build_train_strategy(config, TaskId("worker", 0)) is None


def test_mirrored_replicates_over_the_devices_given():
    # conftest gives this process two logical CPUs.
    config = make_config(strategy={"name": "mirrored", "devices": ["/cpu:0", "/cpu:1"]})
    strategy = S.build_train_strategy(config, TaskId("chief", 0))
    assert strategy.num_replicas_in_sync == 2
    assert isinstance(strategy.extended._cross_device_ops, tf.distribute.ReductionToOneDevice)
    assert S.session_config(config, TaskId("chief", 0)).device_count["CPU"] == 2
    default = S.build_train_strategy(make_config(strategy="mirrored"), TaskId("chief", 0))
    assert default.num_replicas_in_sync == 1  # no GPU here: /cpu:0 alone


def test_mirrored_refuses_a_device_this_process_does_not_have():
    config = make_config(strategy={"name": "mirrored", "devices": ["/cpu:0", "/cpu:7"]})
    with pytest.raises(UsageError, match=re.escape("task chief:0: strategy devices lists /cpu:7 but this process has "
                                                   "only 2 CPU device(s)")):
        S.build_train_strategy(config, TaskId("chief", 0))


def test_nccl_on_a_task_without_gpus_is_refused_when_it_starts():
    config = make_config({"chief": ["localhost:2222"], "worker": ["localhost:2223"]},
                         strategy={"name": "multi_worker_mirrored", "communication": "nccl"})
    with pytest.raises(UsageError, match=r"^task worker:0: strategy\.communication is nccl but this process sees no GPU"):
        S.build_train_strategy(config, TaskId("worker", 0))


def test_collective_options_reach_the_all_reduce_ops():
    """The v1 MultiWorkerMirroredStrategy takes no options; the timeout and ring must still be in its graph.

    In a subprocess: the strategy reads TF_CONFIG and must run in graph mode, as under Estimator.
    """
    code = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(REPO)!r})
        os.environ["TF_CONFIG"] = json.dumps({{"cluster": {{"worker": ["localhost:1", "localhost:2"]}},
                                               "task": {{"type": "worker", "index": 0}}}})
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        from estimator_mnist.cluster import TaskId
        from estimator_mnist.config import config_from_dict
        from estimator_mnist.strategy import build_train_strategy
        config = config_from_dict({{"cluster": {{"worker": ["localhost:1", "localhost:2"]}},
                                   "strategy": {{"name": "multi_worker_mirrored", "communication": "ring",
                                                "collective_timeout_secs": 42}}}}, "t")
        strategy = build_train_strategy(config, TaskId("worker", 0))
        with tf.Graph().as_default() as graph, strategy.scope():
            strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0)))
        ops = [op for op in graph.get_operations() if op.type.startswith("CollectiveReduce")]
        print("RESULT", json.dumps([[op.get_attr("timeout_seconds"), op.get_attr("communication_hint").decode()]
                                    for op in ops]))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    assert json.loads(lines[0][len("RESULT "):]) == [[42.0, "ring"]]


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
