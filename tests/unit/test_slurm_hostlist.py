"""Slurm's compressed host lists and tasks-per-node counts, in Slurm's own order; each malformed form refused."""

import pytest

from estimator_mnist.errors import UsageError
from estimator_mnist.plan.slurm_hostlist import expand_hostlist, expand_tasks_per_node


@pytest.mark.parametrize("text, names", [
    ("n1", ["n1"]),
    ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
    ("a1,b[01-02]", ["a1", "b01", "b02"]),
    ("n[9-10]", ["n9", "n10"]),  # Slurm's order, not the strings' (SlurmClusterResolver's flaw)
    ("n[10,9]", ["n10", "n9"]),  # as written: never sorted
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("gpu-node[007-009],login", ["gpu-node007", "gpu-node008", "gpu-node009", "login"]),
])
def test_host_lists_expand_in_slurm_s_order(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text", ["", "n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "n[1,,2]", "a,,b", "n[[1]]"])
def test_a_malformed_host_list_is_one_line_naming_the_variable(text):
    with pytest.raises(UsageError, match="SLURM_STEP_NODELIST is .* not a Slurm host list"):
        expand_hostlist(text)


@pytest.mark.parametrize("text, counts", [
    ("1", [1]),
    ("3,1", [3, 1]),
    ("2(x3),1", [2, 2, 2, 1]),
    ("1(x2)", [1, 1]),
])
def test_tasks_per_node_expand(text, counts):
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "0", "2(x0)", "2(3)", "x", "1,,2", "-1"])
def test_malformed_tasks_per_node_is_one_line_naming_the_variable(text):
    with pytest.raises(UsageError, match="SLURM_STEP_TASKS_PER_NODE is .* tasks per node"):
        expand_tasks_per_node(text)
