"""Ports and the private network namespace, with stand-in tasks."""

import io
import socket
import threading
import time
from pathlib import Path

import pytest

from estimator_mnist.supervise import private_network as netns
from estimator_mnist.config import config_from_dict
from estimator_mnist.errors import UsageError
from estimator_mnist.supervise.launch import launch
from tests.helpers import free_ports
from tests.process.launching import HEALTHY, fake_commands, make_config, mark_data_prepared


@pytest.fixture
def held_port():
    """A loopback port that another process is listening on, as far as a new cluster is concerned."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_launch_refuses_a_busy_port_on_the_host_network(tmp_path, held_port):
    config = make_config(tmp_path, launcher={"network": "host"}, ports=(held_port, held_port ^ 1))
    mark_data_prepared(config)
    with pytest.raises(UsageError, match=rf"port {held_port} of task chief:0 .* is already in use"):
        launch(config, "cluster.yaml")
    assert not Path(config.run_dir, "logs").exists()


def test_a_private_network_does_not_collide_with_host_ports(tmp_path, held_port):
    config = make_config(tmp_path, launcher={"network": "private"}, ports=(held_port, held_port ^ 1))
    mark_data_prepared(config)
    out = io.StringIO()
    code = launch(config, "cluster.yaml", out=out, command_for=fake_commands(config, HEALTHY))
    assert code == 0, out.getvalue()
    assert netns.PROTECTED in out.getvalue()


def test_task_ports_cannot_be_reached_from_outside_the_private_network(tmp_path):
    """The tasks' namespace has its own loopback: they reach each other, this process cannot reach them."""
    port, other = free_ports(2)
    config = make_config(tmp_path, ports=(port, other), launcher={"network": "private"})
    mark_data_prepared(config)
    probes = {}

    def probe():
        listening = Path(config.model_dir, "listening")
        deadline = time.time() + 60
        while not listening.exists() and time.time() < deadline:
            time.sleep(0.1)
        probes["listening"] = listening.exists()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            probes["outside"] = "connected"
        except OSError as exc:
            probes["outside"] = type(exc).__name__
        Path(config.model_dir, "release").touch()

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    out = io.StringIO()
    code = launch(config, "cluster.yaml", out=out,
                    command_for=fake_commands(config, {**HEALTHY, "chief:0": "chief_listens"}))
    thread.join(timeout=10)
    assert code == 0, out.getvalue()
    assert probes["listening"], "the task never listened (it checks loopback inside its namespace first)"
    assert probes["outside"] == "ConnectionRefusedError"
    assert netns.PROTECTED in out.getvalue()


def test_private_network_refuses_hosts_it_cannot_reach(tmp_path):
    config = config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["10.0.0.7:2"]},
                               "launcher": {"network": "private"}}, "c.yaml")
    with pytest.raises(UsageError, match=r"^c\.yaml: launcher\.network is private but task worker:0 is on host "
                                         r"'10\.0\.0\.7', which a private namespace cannot reach"):
        netns.choose_network(config, "c.yaml")
    network, line = netns.choose_network(dict_config := config_from_dict(
        {"cluster": {"chief": ["localhost:1"], "worker": ["10.0.0.7:2"]}}, "c.yaml"), "c.yaml")
    assert network is None and line.startswith("network: WARNING: the tasks use this machine's network (some tasks "
                                                "use a non-loopback host name)")
    assert "ports 1, 2" in line and dict_config.launcher.network == "auto"


def test_a_bucket_model_dir_keeps_the_tasks_on_the_machine_s_network_and_says_so():
    """A namespace with only loopback would cut the tasks off from the bucket they write their checkpoints to."""
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2"]}
    with pytest.raises(UsageError, match=r"^c\.yaml: launcher\.network is private but model_dir gs://bkt/run is a "
                                         r"bucket, which a namespace with only loopback cannot reach"):
        netns.choose_network(config_from_dict({"cluster": cluster, "launcher": {"network": "private"},
                                               "model_dir": "gs://bkt/run"}, "c.yaml"), "c.yaml")
    network, line = netns.choose_network(config_from_dict({"cluster": cluster, "model_dir": "gs://bkt/run"},
                                                          "c.yaml"), "c.yaml")
    assert network is None and line.startswith("network: WARNING: the tasks use this machine's network (model_dir "
                                                "is a bucket, which the tasks reach over it)")
