"""Tasks, TF_CONFIG (built and parsed), and this machine's hosts and ports."""

import json
import os
import socket
from unittest import mock

import pytest

from estimator_mnist.plan import hosts as H
from estimator_mnist.config import TaskId
from estimator_mnist.config.cluster import parse_cluster
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.topology import build_tf_config, parse_task


def make(cluster):
    # The cluster section alone: ps layouts are valid clusters even where a strategy refuses them.
    return parse_cluster("test.yaml", cluster)


FULL = make({"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "evaluator": "host3"})
WORKERS_ONLY = make({"worker": ["localhost:1111", "localhost:1112"], "evaluator": "localhost"})


def test_tasks_in_start_order():
    ps = make({"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1", "d:1"]})
    assert [str(t) for t in ps.tasks()] == ["ps:0", "ps:1", "chief:0", "worker:0"]
    assert [str(t) for t in FULL.tasks()] == ["chief:0", "worker:0", "worker:1", "evaluator:0"]


@pytest.mark.parametrize("task", [TaskId("chief", 0), TaskId("worker", 0), TaskId("worker", 1)])
def test_training_tasks_get_the_training_cluster(task):
    tf_config = build_tf_config(FULL, task)
    assert tf_config == {
        "cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
        "task": {"type": task.type, "index": task.index},
    }
    json.dumps(tf_config)


def test_ps_tasks_are_in_the_cluster():
    config = make({"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]})
    assert build_tf_config(config, TaskId("ps", 0))["cluster"]["ps"] == ["c:1"]


def test_evaluator_is_not_part_of_the_training_cluster():
    tf_config = build_tf_config(FULL, TaskId("evaluator", 0))
    assert "evaluator" not in tf_config["cluster"]
    assert tf_config["task"] == {"type": "evaluator", "index": 0}
    assert tf_config["cluster"]["chief"] == ["host0:2222"]


def test_evaluator_of_a_worker_only_cluster_sees_worker_0_as_chief():
    assert build_tf_config(WORKERS_ONLY, TaskId("evaluator", 0))["cluster"] == {
        "chief": ["localhost:1111"], "worker": ["localhost:1112"]}
    # The workers themselves keep the layout they train with.
    assert build_tf_config(WORKERS_ONLY, TaskId("worker", 1))["cluster"] == {
        "worker": ["localhost:1111", "localhost:1112"]}


def test_builder_is_pure():
    with mock.patch.dict(os.environ, {}, clear=True):
        build_tf_config(FULL, TaskId("worker", 1))
        assert "TF_CONFIG" not in os.environ


@pytest.mark.parametrize("text, pattern", [
    ("worker", r"--task 'worker' is not TYPE:INDEX; use one of: chief:0, worker:0, worker:1, evaluator:0"),
    ("worker:2", r"test\.yaml: there is no task worker:2 in this cluster; use one of: chief:0"),
    ("ps:0", r"there is no task ps:0"),
])
def test_parse_task_errors(text, pattern):
    with pytest.raises(UsageError, match=pattern):
        parse_task(text, FULL, "test.yaml")


def test_parse_task():
    assert parse_task("worker:1", FULL, "f") == TaskId("worker", 1)
    assert FULL.chief_task == TaskId("chief", 0)
    assert WORKERS_ONLY.chief_task == TaskId("worker", 0)


def test_busy_port_is_named():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = make({"chief": ["localhost:1"], "worker": [f"localhost:{port}"]})
        # Port 1 is privileged but free; only the held one must be reported.
        with pytest.raises(UsageError, match=rf"f\.yaml: port {port} of task worker:0 \(localhost:{port}\) is already in use"):
            H.check_ports_free(config, "f.yaml")
    H.check_ports_free(config, "f.yaml")


def test_one_set_of_loopback_names():
    assert H.all_on_loopback(make({"chief": ["localhost:1"], "worker": ["127.0.0.1:2", "[::1]:3"]}))
    assert not H.all_on_loopback(make({"chief": ["localhost:1"], "worker": ["10.0.0.7:2"]}))
    assert H.same_machine("localhost", "127.0.0.1") and not H.same_machine("localhost", "host1")


def test_remote_hosts_are_refused_by_launch():
    assert H.is_local_host("localhost")
    assert H.is_local_host(socket.gethostname())
    assert not H.is_local_host("host-b.example.invalid")
    with pytest.raises(UsageError, match=r"task worker:0 is on host 'host1', which is not this machine; .*--task worker:0"):
        H.check_local(make({"chief": ["localhost:1"], "worker": ["host1:2"]}), "f.yaml")


class TestRunConfigFromBuiltTfConfig:
    """What Estimator itself makes of our TF_CONFIG, with the environment patched
    the way tensorflow/estimator's run_config_test.py does it."""

    @pytest.fixture(autouse=True)
    def _tf(self):
        self.tf = pytest.importorskip("tensorflow")

    def run_config(self, cluster, task):
        with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(build_tf_config(cluster, task))}):
            return self.tf.estimator.RunConfig()

    def test_chief(self):
        config = self.run_config(FULL, TaskId("chief", 0))
        assert config.task_type == "chief" and config.is_chief
        assert config.num_worker_replicas == 3
        assert config.master == "grpc://host0:2222"

    def test_worker(self):
        config = self.run_config(FULL, TaskId("worker", 1))
        assert config.task_type == "worker" and config.task_id == 1 and not config.is_chief
        assert config.global_id_in_cluster == 2

    def test_evaluator_of_worker_only_cluster(self):
        # Without the chief rewrite, RunConfig raises 'must have one "chief" node'.
        config = self.run_config(WORKERS_ONLY, TaskId("evaluator", 0))
        assert config.task_type == "evaluator"
        assert not config.is_chief
        assert config.master == ""
        assert config.cluster_spec.as_dict() == {}
