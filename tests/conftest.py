"""Shared fixtures: small tasks that make exact answers cheap."""
import numpy as np
import pytest
import torch

from fedcompanion import tasks


@pytest.fixture(scope="session")
def lsq():
    """Heterogeneous least squares: 6 clients of unequal size, float64, known optimum."""
    return tasks.least_squares_task(num_clients=6, dim=5, seed=0)


@pytest.fixture(scope="session")
def lsq_sized():
    """Least squares with size weights w_i = n_i / n (unequal), float64."""
    clients = [(np.random.default_rng(i).normal(size=(n, 4)), np.random.default_rng(10 + i).normal(size=n))
               for i, n in enumerate([5, 9, 14, 7])]
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 1, bias=False))
    return tasks.from_client_arrays("lsq-sized", clients, net, "squared", weights="size", dtype=torch.float64)


@pytest.fixture(scope="session")
def small_mnist():
    return tasks.federated_dataset_task("mnist", 20, "dirichlet", "mlp", seed=0, alpha=0.5, hidden=(16,))
