"""The real MNIST, prepared once per machine by the same code as `prepare-data`; one real Slurm cluster for
every Slurm test of the session (tests/e2e/slurm_cluster.py)."""

import os
import uuid

import pytest


@pytest.fixture(scope="session")
def mnist_data_dir():
    from estimator_mnist.config import default_data_dir
    from estimator_mnist.mnist_data.prepare import prepare_data

    data_dir = default_data_dir()
    print(prepare_data(data_dir, log=lambda m: print(f"prepare-data: {m}")))
    return data_dir


@pytest.fixture(scope="session")
def slurm():
    from tests.e2e.simulated_hosts import require_namespaces
    from tests.e2e.slurm_cluster import PACKAGES, SlurmCluster
    from tests.system_packages import require_debian_packages

    require_namespaces()
    require_debian_packages(*PACKAGES)
    cluster = SlurmCluster(f"s{os.getpid() % 100000}{uuid.uuid4().hex[:3]}")
    yield cluster
    cluster.close()
