"""train under srun: role, index and peers from Slurm's step environment over the YAML's roles; each refusal."""

import os
import socket
from unittest import mock

import pytest

from estimator_mnist import cli, commands
from estimator_mnist.config import TaskId
from estimator_mnist.errors import RetryableFailure, UsageError
from estimator_mnist.plan.slurm_source import (ERR_PORT_TAKEN, PORT_BASE, PORT_STRIDE, from_slurm, in_slurm_step,
                                               read_step, step_port)

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


def job_port(job, position, env=None):
    """The hashed port of `position` in job `job`'s step 0 (no reserved ports)."""
    return step_port(read_step(env or step_env("n1", "1", 0, "n1", job=str(job))), position)


def mapped(cluster, env, resolver=resolves, in_use=lambda port: False):
    source = from_slurm({"cluster": cluster}, "c.yaml", env, resolver, in_use)
    return source.data["cluster"], source.task, source.note


def test_one_node_three_tasks_the_evaluator_beside_the_chief_and_ports_apart():
    base = job_port(4242, 0)
    for rank, expected in enumerate([TaskId("chief", 0), TaskId("evaluator", 0), TaskId("worker", 0)]):
        cluster, task, _ = mapped(LOCAL, step_env("n1", "3", rank, "n1"))
        assert task == expected
        assert cluster == {"chief": [f"n1:{base}"], "evaluator": "n1", "worker": [f"n1:{base + 2}"]}


def test_two_nodes_put_chief_and_worker_apart():
    cluster, task, note = mapped(LOCAL, step_env("n[1-2]", "2,1", 2, "n2"))
    base = job_port(4242, 0)
    assert task == TaskId("worker", 0)
    assert cluster == {"chief": [f"n1:{base}"], "evaluator": "n1", "worker": [f"n2:{base}"]}
    assert "worker:0 (rank 2 on n2)" in note and "hosts are replaced by the step's nodes" in note


def test_three_nodes_several_tasks_per_node_in_slurm_s_order():
    # n[9-11]: n9 first, as Slurm starts it (a string sort would put n10 first).
    env = step_env("n[9-11]", "2,2,1", 4, "n11")
    cluster, task, _ = mapped(PS, env)
    port = job_port(4242, 0)
    assert task == TaskId("ps", 0)
    assert cluster == {"chief": [f"n9:{port}"], "evaluator": "n9", "worker": [f"n10:{port}", f"n10:{port + 1}"],
                       "ps": [f"n11:{port}"]}


def test_tasks_per_node_repeat_form():
    cluster, task, _ = mapped({"worker": ["h:1", "h:2", "h:3", "h:4"]}, step_env("a1,b[01-02]", "2,1(x2)", 3, "b02"))
    port = job_port(4242, 0)
    assert task == TaskId("worker", 3)
    assert cluster == {"worker": [f"a1:{port}", f"a1:{port + 1}", f"b01:{port}", f"b02:{port}"]}


def test_reserved_ports_are_the_ports_whatever_the_job_id():
    """srun --resv-ports under MpiParams=ports: the same numbers on every node, none shared with another step."""
    for job in ("7", str(7 + 512)):  # ids equal modulo 512 collided on a shared node
        env = step_env("n[1-2]", "2,1", 2, "n2", job=job, SLURM_STEP_RESV_PORTS="20004-20005,20009")
        cluster, _, note = mapped(LOCAL, env)
        assert cluster == {"chief": ["n1:20004"], "evaluator": "n1", "worker": ["n2:20004"]}
        assert "ports reserved by Slurm (SLURM_STEP_RESV_PORTS)" in note


def test_without_reserved_ports_a_rerun_chooses_again_and_stays_in_range():
    first = job_port(4242, 0, step_env("n1", "1", 0, "n1"))
    rerun = job_port(4242, 0, step_env("n1", "1", 0, "n1", SLURM_STEP_ID="1"))
    requeued = job_port(4242, 0, step_env("n1", "1", 0, "n1", SLURM_RESTART_COUNT="1"))
    assert len({first, rerun, requeued}) == 3
    assert job_port(7, 0) != job_port(7 + 512, 0)  # no longer the job id modulo 512
    for job in range(0, 2000, 37):
        assert PORT_BASE <= job_port(job, 0) and job_port(job, PORT_STRIDE - 1) < 32768  # below the ephemeral ports


def test_a_port_taken_on_the_node_is_200_before_tensorflow_starts():
    env = step_env("n1", "3", 2, "n1", SLURM_STEP_RESV_PORTS="20000-20002")
    with pytest.raises(RetryableFailure) as taken:
        mapped(LOCAL, env, in_use=lambda port: port == 20002)
    assert str(taken.value) == ERR_PORT_TAKEN.format(port=20002, node="n1", task="worker:0", how="listening")
    assert mapped(LOCAL, step_env("n1", "3", 1, "n1", SLURM_STEP_RESV_PORTS="20000-20002"),
                  in_use=lambda port: True)[1] == TaskId("evaluator", 0)  # no server, no port


def test_a_taken_port_ends_train_with_200_and_one_line(tmp_path, capsys):
    with mock.patch.dict(os.environ, step_env("localhost", "3", 0, "localhost", SLURM_STEP_RESV_PORTS="20000-20002")), \
            mock.patch("estimator_mnist.plan.slurm_source.port_in_use", lambda port: True):
        os.environ.pop("TF_CONFIG", None)
        code = cli.main(["train", "--cluster", "config/local.yaml", "--run-dir", str(tmp_path)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 200 and lines == ["estimator-mnist: error: " + ERR_PORT_TAKEN.format(
        port=20000, node="localhost", task="chief:0", how="listening")]


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
    (step_env("n1", "33", 0, "n1"), {"worker": [f"h:{p}" for p in range(1, 34)]}, "more than the 32 ports"),
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


def test_train_under_srun_finds_its_task_and_plans_from_its_own_cpus(tmp_path):
    args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--run-dir", str(tmp_path)])
    env = step_env("localhost", "3", 2, "localhost", SLURM_CPUS_PER_TASK="3")
    with mock.patch.dict(os.environ, env):
        os.environ.pop("TF_CONFIG", None)
        resolved = commands.resolve(args)
    config, source = resolved.config, resolved.source
    assert source.task == TaskId("worker", 0) and source.tf_config is None and not source.gpus_from_manager
    assert source.own_cpus == 3 and [str(a) for a in config.cluster.worker] == [f"localhost:{job_port(4242, 2, env)}"]
    assert source.note.startswith("Slurm job 4242 step 0: this is worker:0")
    plan = resolved.spec(cpu_set=(0, 1, 2, 3, 4, 5)).plan
    # Its own 3 CPUs, not half of the machine's 6 shared with the chief beside it, and no pinning.
    assert plan.intra_op_threads == 3 and plan.cpus is None


def test_train_with_task_or_tf_config_ignores_slurm(tmp_path):
    args = cli.build_parser().parse_args(["train", "--cluster", "config/local.yaml", "--task", "chief:0"])
    with mock.patch.dict(os.environ, step_env("nowhere", "7", 5, "nowhere")):
        source = commands.resolve(args).source
    assert source.task == TaskId("chief", 0) and source.note is None and source.own_cpus is None
