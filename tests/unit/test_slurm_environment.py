"""train under srun: role, index and peers from Slurm's step environment over the YAML's roles; each refusal."""

import os
import socket
from unittest import mock

import pytest

from estimator_mnist import cli, commands
from estimator_mnist.config import TaskId
from estimator_mnist.errors import UsageError
from estimator_mnist.model_files import slurm_records
from estimator_mnist.plan.slurm_source import from_slurm, in_slurm_step, read_step

LOCAL = {"chief": ["localhost:2222"], "worker": ["localhost:2223"], "evaluator": "localhost"}
PS = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"], "evaluator": "h"}


def step_env(nodes, per_node, rank, node, job="4242", **extra):
    env = {"SLURM_STEP_NODELIST": nodes, "SLURM_STEP_TASKS_PER_NODE": per_node, "SLURM_PROCID": str(rank),
           "SLURMD_NODENAME": node, "SLURM_JOB_ID": job, "SLURM_STEP_ID": "0"}
    return {**env, **extra}


def resolves(name, port, type=None):  # pylint: disable=redefined-builtin
    return [(socket.AF_INET, type, 6, "", ("192.0.2.1", 0))]


def n2_unknown(name, port, type=None):  # pylint: disable=redefined-builtin
    if name == "n2":
        raise socket.gaierror(-2, "Name or service not known")
    return resolves(name, port, type)


BASE = 30000  # the fake agreement's ports: BASE + rank


def fake_hold(held):
    def hold(reserved, task, node):
        held.append((task, node, reserved))
        return reserved or 40000, None
    return hold


def fake_agree(model_dir, job, key, rank, own, server_ranks, task):
    return {r: ("?", BASE + r) for r in server_ranks}


def mapped(cluster, env, resolver=resolves, held=None):
    data = {"cluster": cluster, **({"strategy": "parameter_server"} if "ps" in cluster else {})}
    source = from_slurm(data, "c.yaml", env, resolver, fake_hold([] if held is None else held),
                        fake_agree)
    return source.data["cluster"], source.task, source.note


def test_one_node_three_tasks_the_evaluator_beside_the_chief():
    for rank, expected in enumerate([TaskId("chief", 0), TaskId("evaluator", 0), TaskId("worker", 0)]):
        cluster, task, _ = mapped(LOCAL, step_env("n1", "3", rank, "n1"))
        assert task == expected
        assert cluster == {"chief": [f"n1:{BASE}"], "evaluator": "n1", "worker": [f"n1:{BASE + 2}"]}


def test_two_nodes_put_chief_and_worker_apart():
    held = []
    cluster, task, note = mapped(LOCAL, step_env("n[1-2]", "2,1", 2, "n2"), held=held)
    assert task == TaskId("worker", 0) and held == [("worker:0", "n2", None)]  # no reserved port: the kernel's
    assert cluster == {"chief": [f"n1:{BASE}"], "evaluator": "n1", "worker": [f"n2:{BASE + 2}"]}
    assert "worker:0 (rank 2 on n2)" in note and "hosts are replaced by the step's nodes" in note
    assert "chosen free on each node (no ports reserved" in note


def test_three_nodes_several_tasks_per_node_in_slurm_s_order():
    # n[9-11]: n9 first, as Slurm starts it (a string sort would put n10 first).
    cluster, task, _ = mapped(PS, step_env("n[9-11]", "2,2,1", 4, "n11"))
    assert task == TaskId("ps", 0)
    assert cluster == {"chief": [f"n9:{BASE}"], "evaluator": "n9", "worker": [f"n10:{BASE + 2}", f"n10:{BASE + 3}"],
                       "ps": [f"n11:{BASE + 4}"]}


def test_tasks_per_node_repeat_form():
    cluster, task, _ = mapped({"worker": ["h:1", "h:2", "h:3", "h:4"]}, step_env("a1,b[01-02]", "2,1(x2)", 3, "b02"))
    assert task == TaskId("worker", 3)
    assert cluster == {"worker": [f"a1:{BASE}", f"a1:{BASE + 1}", f"b01:{BASE + 2}", f"b02:{BASE + 3}"]}


def test_a_task_holds_the_reserved_port_of_its_position_on_its_node():
    """srun --resv-ports under MpiParams=ports: the k-th task on a node takes the k-th reserved port."""
    held = []
    _, _, note = mapped(LOCAL, step_env("n1", "3", 2, "n1", SLURM_STEP_RESV_PORTS="20004-20005,20009"), held=held)
    assert held == [("worker:0", "n1", 20009)] and "ports reserved by Slurm (SLURM_STEP_RESV_PORTS)" in note
    held.clear()
    mapped(LOCAL, step_env("n1", "3", 1, "n1", SLURM_STEP_RESV_PORTS="20004-20005,20009"), held=held)
    assert held == []  # the evaluator has no server, so no port


def test_in_slurm_step_needs_a_step_not_just_a_job():
    assert in_slurm_step(step_env("n1", "1", 0, "n1"))
    assert not in_slurm_step({"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n1"})  # the batch script itself


def test_cpus_and_gpus_given_by_slurm():
    step = read_step(step_env("n1", "1", 0, "n1", SLURM_CPUS_PER_TASK="2", CUDA_VISIBLE_DEVICES="0",
                              SLURM_STEP_GPUS="3"))
    assert step.cpus_per_task == 2 and step.gpus_by_slurm
    assert not read_step(step_env("n1", "1", 0, "n1", CUDA_VISIBLE_DEVICES="0")).gpus_by_slurm


@pytest.mark.parametrize("env, cluster, message", [
    (step_env("n[1-2]", "2,2", 0, "n1"), LOCAL, "the cluster has 3 tasks .* but the Slurm step has 4"),
    (step_env("n[1-2]", "2,1", 2, "n1"), LOCAL, "Slurm started rank 2 on n1, but block distribution puts it on n2"),
    (step_env("n[1-2]", "3", 0, "n1"), LOCAL, "gives 1 node.* SLURM_STEP_NODELIST 'n\\[1-2\\]' lists 2 node"),
    ({**step_env("n1", "3", 0, "n1"), "SLURM_STEP_NUM_TASKS": "4"}, LOCAL, "SLURM_STEP_NUM_TASKS is 4"),
    (step_env("n1", "3", 3, "n1"), LOCAL, "SLURM_PROCID is '3', not a rank below the step's 3 tasks"),
    (step_env("n1", "3", 0, ""), LOCAL, "SLURMD_NODENAME is None"),
    (step_env("n1", "3", 0, "n1", job="x"), LOCAL, "SLURM_JOB_ID is 'x', not a whole number"),
    (step_env("n[1-", "3", 0, "n1"), LOCAL, "SLURM_STEP_NODELIST is 'n\\[1-', not a Slurm host list"),
    (step_env("n1", "3(x)", 0, "n1"), LOCAL, "SLURM_STEP_TASKS_PER_NODE is '3\\(x\\)'"),
    (step_env("n1", "3", 0, "n1", SLURM_STEP_RESV_PORTS="20000-20001"), LOCAL,
     "reserves 2 port\\(s\\), but node n1 runs 3 tasks of this step; start the step with srun --resv-ports=3"),
    (step_env("n1", "3", 0, "n1", SLURM_STEP_RESV_PORTS="20000-x"), LOCAL, "SLURM_STEP_RESV_PORTS is '20000-x'"),
])
def test_each_refusal_is_one_line(env, cluster, message):
    with pytest.raises(UsageError, match=message):
        mapped(cluster, env)


def test_a_node_that_does_not_resolve_is_named():
    with pytest.raises(UsageError, match="node n2 \\(task worker:0\\) does not resolve"):
        mapped(LOCAL, step_env("n[1-2]", "2,1", 0, "n1"), n2_unknown)


def test_no_cluster_section_is_refused():
    with pytest.raises(UsageError, match="c.yaml: under srun, train takes the roles"):
        from_slurm({}, "c.yaml", step_env("n1", "1", 0, "n1"))


def test_train_under_srun_finds_its_task_holds_a_port_and_plans_from_its_own_cpus(tmp_path):
    """The real agreement: the chief's port already published in model_dir for this step, the worker holds a free
    port of its own (the kernel's choice), and TensorFlow will bind it beside (TF_GRPC_REUSE_PORT)."""
    args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--run-dir", str(tmp_path)])
    env = step_env("localhost", "3", 2, "localhost", SLURM_CPUS_PER_TASK="3")
    slurm_records.publish(str(tmp_path / "model"), "4242", "port", 0,
                          {"step": slurm_records.step_key(env), "rank": 0, "node": "localhost", "port": 31000})
    with mock.patch.dict(os.environ, env):
        os.environ.pop("TF_CONFIG", None)
        resolved = commands.resolve(args)
    config, source = resolved.config, resolved.source
    assert source.task == TaskId("worker", 0) and source.tf_config is None and not source.gpus_from_manager
    own = config.cluster.worker[0].port
    assert [str(a) for a in config.cluster.chief] == ["localhost:31000"] and own != 31000
    assert slurm_records.read_published(str(tmp_path / "model"), "4242", "port", 2)["port"] == own
    assert source.own_cpus == 3 and source.note.startswith("Slurm job 4242 step 0: this is worker:0")
    plan = resolved.spec(cpu_set=(0, 1, 2, 3, 4, 5)).plan
    # Its own 3 CPUs, not half of the machine's 6 shared with the chief beside it, and no pinning.
    assert plan.intra_op_threads == 3 and plan.cpus is None
    assert ("TF_GRPC_REUSE_PORT", "1") in plan.env


def test_train_with_task_or_tf_config_ignores_slurm(tmp_path):
    args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--task", "chief:0"])
    with mock.patch.dict(os.environ, step_env("nowhere", "7", 5, "nowhere")):
        source = commands.resolve(args).source
    assert source.task == TaskId("chief", 0) and source.note is None and source.own_cpus is None
