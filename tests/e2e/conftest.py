"""The real MNIST, prepared once per machine by the same code as `prepare-data`; one real Slurm cluster for
every Slurm test of the session (tests/e2e/slurm_cluster.py); how the tier's two workers share its modules."""

import os
import uuid
from pathlib import Path

import pytest

# One pytest-xdist worker runs all of these, since they share the session's Slurm cluster (one per worker).
SLURM_MODULES = ("test_slurm", "test_slurm_operations", "test_slurm_preemption", "test_slurm_sweep")


def _unit(nodeid: str) -> str:
    """A test's unit of work: its module, or "slurm" for the Slurm modules."""
    module = nodeid.split("::", 1)[0]
    return "slurm" if Path(module).stem in SLURM_MODULES else module


def pytest_xdist_make_scheduler(config, log):
    """run_tests.sh runs this tier on two workers (`-n 2 --dist loadscope`): a test that mostly waits (on Slurm,
    on a stall or a lost peer to be noticed, on a timeout) leaves a core idle, which a test on the other worker
    uses. A unit is a module, so a module's fixtures (one cluster run for many tests) run once, and the Slurm
    modules are one unit. (pytest-xdist's `loadgroup` marks do not group under pytest 9: it renames a test's
    `_nodeid`, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-outside-toplevel

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return ModuleScheduling(config, log)


# The longest units first, so that none of them starts last and ends the tier alone; seconds one at a time on
# the Zen 4 (2026-11-26): Slurm 266, cluster_run and sweep_run 116, benchmarks 96, prepare_data_killed 83,
# preemption 82, multi_host 79, strategies_run 77; model_dir_upgrade 78 (Xeon AMX, 2026-11-28, cores shared). The
# rest (20-55 s each) follow in their usual order.
LONGEST_FIRST = ("slurm", "test_cluster_run", "test_sweep_run", "test_benchmarks", "test_prepare_data_killed",
                 "test_preemption", "test_multi_host", "test_model_dir_upgrade", "test_strategies_run")


def pytest_collection_modifyitems(items):
    def rank(item):
        unit = _unit(item.nodeid)
        return LONGEST_FIRST.index(Path(unit).stem) if Path(unit).stem in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: a unit's tests keep their order


@pytest.fixture(scope="session")
def mnist_data_dir():
    from estimator_mnist.config import default_data_dir
    from estimator_mnist.mnist_data.prepare import prepare_data

    data_dir = default_data_dir()
    print(prepare_data(data_dir, log=lambda m: print(f"prepare-data: {m}")))
    return data_dir


def _slurm_cluster(reserved_ports: bool):
    from tests.e2e.simulated_hosts import require_namespaces
    from tests.e2e.slurm_cluster import PACKAGES, SlurmCluster
    from tests.system_packages import require_debian_packages

    require_namespaces()
    require_debian_packages(*PACKAGES)
    return SlurmCluster(f"{'s' if reserved_ports else 'u'}{os.getpid() % 100000}{uuid.uuid4().hex[:3]}",
                        reserved_ports=reserved_ports)


@pytest.fixture(scope="session")
def slurm():
    """The cluster with ports reserved for steps (MpiParams=ports)."""
    cluster = _slurm_cluster(reserved_ports=True)
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def slurm_without_reserved_ports():
    """The common configuration, no MpiParams=ports: the tasks choose their ports (test_slurm_operations.py)."""
    cluster = _slurm_cluster(reserved_ports=False)
    yield cluster
    cluster.close()
