"""Synthetic federated data whose heterogeneity is set by a parameter (and, for least squares,
whose optimum is known in closed form)."""
from __future__ import annotations

import numpy as np

from ..validation import check_number


def synthetic_li(
    num_clients: int,
    alpha: float,
    beta: float,
    rng: np.random.Generator,
    dim: int = 60,
    num_classes: int = 10,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Synthetic(alpha, beta) of Li et al. (FedProx, 2020): per-client softmax-regression data.

    For client k: u_k ~ N(0, alpha), W_k, b_k ~ N(u_k, 1); B_k ~ N(0, beta), v_k ~ N(B_k, 1);
    features x ~ N(v_k, diag(j^-1.2)); label y = argmax softmax(W_k x + b_k). alpha controls how
    much the local models differ, beta how much the local features differ. Client sizes follow
    the FedProx code: lognormal(4, 2) + 50.
    """
    check_number("num_clients", num_clients, low=1, integer=True)
    check_number("alpha", alpha, low=0.0)
    check_number("beta", beta, low=0.0)
    sizes = (rng.lognormal(4, 2, num_clients).astype(int) + 50).clip(max=10_000)
    cov = np.diag(np.arange(1, dim + 1) ** -1.2)
    clients = []
    for n in sizes:
        u, big_b = rng.normal(0, np.sqrt(alpha)), rng.normal(0, np.sqrt(beta))
        w = rng.normal(u, 1, (num_classes, dim))
        b = rng.normal(u, 1, num_classes)
        v = rng.normal(big_b, 1, dim)
        x = rng.multivariate_normal(v, cov, n)
        y = np.argmax(x @ w.T + b, axis=1)
        clients.append((x.astype(np.float32), y.astype(np.int64)))
    return clients


def heterogeneous_least_squares(
    num_clients: int,
    dim: int,
    rng: np.random.Generator,
    rows: tuple[int, int] = (50, 150),
    noise: float = 0.1,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The CEADMM paper's non-IID linear-regression data: client i holds (A_i, b_i), d_i rows.

    d_i ~ U{rows[0]..rows[1]}; the first third of clients draw A_i from Student-t(5), the second
    third from U[-5, 5], the rest from N(0, 1). Reconstruction, stated: the extract does not say
    how b_i is made; here b_i = A_i x_true + noise * N(0, 1) with one x_true ~ N(0, I) shared by
    all clients, so the clients differ in their features, not in their target model.
    """
    check_number("num_clients", num_clients, low=1, integer=True)
    check_number("dim", dim, low=1, integer=True)
    x_true = rng.normal(size=dim)
    third = num_clients // 3
    clients = []
    for i in range(num_clients):
        d = int(rng.integers(rows[0], rows[1] + 1))
        if i < third:
            a = rng.standard_t(5, (d, dim))
        elif i < 2 * third:
            a = rng.uniform(-5, 5, (d, dim))
        else:
            a = rng.normal(size=(d, dim))
        b = a @ x_true + noise * rng.normal(size=d)
        clients.append((a, b))
    return clients
