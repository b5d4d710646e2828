"""The real MNIST, prepared once per machine by the same code as `prepare-data`."""

import pytest


@pytest.fixture(scope="session")
def mnist_data_dir():
    from estimator_mnist.config import default_data_dir
    from estimator_mnist.mnist_data.prepare import prepare_data

    data_dir = default_data_dir()
    print(prepare_data(data_dir, log=lambda m: print(f"prepare-data: {m}")))
    return data_dir
