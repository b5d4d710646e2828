"""A Slurm step's ports (plan/slurm_ports.py): each task holds a port no other process on its node can take, its
reserved one or the kernel's choice, chosen again within the step when taken; the tasks agree through model_dir."""

import socket

import pytest

from estimator_mnist.errors import RetryableFailure
from estimator_mnist.plan import slurm_ports
from estimator_mnist.model_files import slurm_records
from estimator_mnist.plan.slurm_ports import ERR_NO_PORT, agree, hold_port


@pytest.fixture(autouse=True)
def release_held():
    yield
    while slurm_ports._HELD:  # pylint: disable=protected-access
        slurm_ports._HELD.pop().close()  # pylint: disable=protected-access


def test_ports_held_on_one_node_never_meet_whatever_the_job():
    """Many tasks of many jobs on one node: each its own port, and nothing else can bind it meanwhile."""
    ports = [hold_port(None, f"worker:{i}", "n1")[0] for i in range(200)]
    assert len(set(ports)) == 200
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("0.0.0.0", ports[0]))


def test_a_held_port_is_shared_only_with_a_server_that_asks_for_it():
    """TensorFlow's server binds with SO_REUSEPORT (TF_GRPC_REUSE_PORT=1) beside the held socket, and listens."""
    port, _ = hold_port(None, "chief:0", "n1")
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind(("0.0.0.0", port))
        server.listen()
        with socket.create_connection(("127.0.0.1", port)):
            pass


def test_a_free_reserved_port_is_held():
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        free = probe.getsockname()[1]
    assert hold_port(free, "chief:0", "n1") == (free, None)


def test_a_reserved_port_taken_is_chosen_again_within_the_step():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        port, note = hold_port(busy, "worker:0", "n2")
    assert port != busy and note.startswith(f"reserved port {busy} on n2 is taken by another process")
    assert note.endswith(f"chose another: {port}")


def test_a_reserved_port_shared_by_a_listener_is_chosen_again():
    """A listener with SO_REUSEPORT of the same user lets the bind through: that it listens shows it is taken."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        port, note = hold_port(busy, "worker:0", "n2")
    assert port != busy and "(listening)" in note


def test_no_port_at_all_is_200_with_one_line():
    def refuse(port):
        raise OSError(98, "Address already in use")

    with pytest.raises(RetryableFailure) as failed:
        hold_port(None, "worker:0", "n2", bind=refuse)
    assert str(failed.value) == ERR_NO_PORT.format(task="worker:0", node="n2",
                                                   reason="port chosen by the kernel: Address already in use")


def test_tasks_agree_on_the_ports_their_step_published(tmp_path):
    model_dir = str(tmp_path)
    slurm_records.publish(model_dir, "7", "port", 2, {"step": "attempt 0.0", "rank": 2, "node": "n2", "port": 99})
    assert agree(model_dir, "7", "attempt 0.1", 2, ("n2", 41000), [0, 2], "worker:0", secs=5,
                 sleep=lambda _: slurm_records.publish(model_dir, "7", "port", 0, {
                     "step": "attempt 0.1", "rank": 0, "node": "n1", "port": 42000})) == {
        0: ("n1", 42000), 2: ("n2", 41000)}  # the worker's own record of step 0.0 replaced by its 0.1's


def test_a_peer_that_never_publishes_is_named_after_the_bound(tmp_path):
    now = [0.0]

    def sleep(secs):
        now[0] += secs

    with pytest.raises(RetryableFailure, match=r"task evaluator:0: the step's ports of rank 0, rank 2 were not "
                                               r"published in .*/slurm/7 within SLURM_PORTS_WAIT_SECS=3 s"):
        agree(str(tmp_path), "7", "attempt 0.0", 1, None, [0, 2], "evaluator:0", secs=3, sleep=sleep,
              clock=lambda: now[0])
    assert slurm_records.read_published(str(tmp_path), "7", "port", 1) is None  # the evaluator has no port
