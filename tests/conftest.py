"""Shared fixtures: small tasks that make exact answers cheap; and an exit that skips native teardown."""
import atexit
import os
import sys

import numpy as np
import pytest
import torch

from fedcompanion import tasks
from fedcompanion.engine import batched
from fedcompanion.models import Centroids

_status: list[int] = []


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_sessionfinish(session):
    """Remember the session's final exit status, for ``_exit_with_status``."""
    yield
    _status.append(int(session.exitstatus))


def _exit_with_status() -> None:
    """Leave the interpreter with pytest's status once every Python exit handler registered after this module's
    import has run, skipping the C-level teardown of the extension modules (torch, grpc, ...). That teardown once
    aborted CI with ``munmap_chunk(): invalid pointer`` after all 809 tests had passed, making ``make test`` fail
    on a run whose every test had passed. Nothing of the project's runs on that path."""
    if _status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_status[-1])


atexit.register(_exit_with_status)


@pytest.fixture(params=["clientwise", "products"])
def mlp_path(request, monkeypatch):
    """The batched engine's two MLP kernels, as the engine name that runs it (``"batched-clientwise"``, each
    client in a thread, what ``"batched"`` takes on a CPU; ``"batched-products"``, the products batched over
    clients, a GPU's). The test fails if its runs never reached the kernel."""
    name = "clientwise_steps" if request.param == "clientwise" else "mlp_steps"
    original, calls = getattr(batched, name), []

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(batched, name, counted)
    yield f"batched-{request.param}"
    assert calls, f"no run took the {request.param} kernel"


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


@pytest.fixture(scope="session")
def blobs():
    """Four clients, each mostly holding one of four 2-D blobs (non-IID clustering)."""
    rng = np.random.default_rng(0)
    centres = np.array([[4.0, 0.0], [0.0, 4.0], [-4.0, 0.0], [0.0, -4.0]])
    clients = []
    for i in range(4):
        own = rng.normal(centres[i], 0.6, size=(40, 2))
        other = rng.normal(centres[(i + 1) % 4], 0.6, size=(8, 2))
        clients.append((np.vstack([own, other]), np.zeros((48, 4))))
    return tasks.from_client_arrays("blobs", clients, Centroids(4, 2), "cluster", dtype=torch.float64)
