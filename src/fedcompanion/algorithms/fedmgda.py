r"""FedMGDA+ (Hu, Wang, Gong, Wang & Yu, IEEE TNSE 2022, "Federated Learning Meets Multi-objective
Optimization").

Each active client runs FedAvg's local SGD and uploads :math:`\Delta_i = x - x_i`; the server normalises the
updates, :math:`g_i = \Delta_i / \|\Delta_i\|`, and finds the min-norm point of their convex hull within an
:math:`\epsilon`-ball of the FedAvg weights :math:`q^0` (:math:`q^0_i = w_i/\sum_{j\in A} w_j`):

.. math::
    \lambda^\star = \arg\min_{\lambda \in \Delta_K,\ \|\lambda - q^0\|_\infty \le \epsilon}
        \Big\|\sum_i \lambda_i g_i\Big\|^2, \qquad x \leftarrow x - \eta\sum_i \lambda^\star_i g_i .

:math:`\epsilon = 0` is FedAvg on normalised updates, :math:`\epsilon = 1` plain MGDA (a common descent
direction of all participants' objectives). The quadratic programme (K variables, the K x K Gram matrix of
the :math:`g_i`) is solved by SLSQP and then polished exactly on its active set (see :func:`min_norm_weights`).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..validation import check_number
from .base import Algorithm, delta, register


def min_norm_weights(gram: torch.Tensor, center: torch.Tensor, epsilon: float) -> torch.Tensor:
    """lambda* = argmin lambda' G lambda over the simplex with ||lambda - center||_inf <= epsilon.

    Solved by SLSQP (scipy), then polished: with the coordinates that sit at a bound fixed, the optimum of the free
    ones solves a linear KKT system, which is solved exactly and kept if it stays feasible and is no worse.
    Both run with one BLAS thread: SLSQP's iterates depend on OpenBLAS's thread count (measured: the same Gram
    matrix gave different last bits with one and two threads, and so a different run on another machine)."""
    from scipy.optimize import minimize
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        return _min_norm_weights(gram, center, epsilon, minimize)


def _min_norm_weights(gram: torch.Tensor, center: torch.Tensor, epsilon: float, minimize) -> torch.Tensor:
    g = gram.detach().cpu().double().numpy()
    c = center.detach().cpu().double().numpy()
    low, high = np.clip(c - epsilon, 0, 1), np.clip(c + epsilon, 0, 1)
    k = len(c)
    start = np.clip(c, low, high)
    start = start / start.sum()
    solved = minimize(lambda v: v @ g @ v, start, jac=lambda v: 2 * g @ v, bounds=list(zip(low, high)),
                      constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1, "jac": lambda v: np.ones(k)}],
                      method="SLSQP", options={"ftol": 1e-16, "maxiter": 500})
    lam = np.clip(solved.x, low, high)
    free = (lam > low + 1e-9) & (lam < high - 1e-9)
    if free.any():
        fixed, n = ~free, int(free.sum())
        kkt = np.zeros((n + 1, n + 1))
        kkt[:n, :n], kkt[:n, n], kkt[n, :n] = 2 * g[np.ix_(free, free)], 1.0, 1.0
        rhs = np.concatenate([-2 * g[np.ix_(free, fixed)] @ lam[fixed], [1 - lam[fixed].sum()]])
        exact = np.linalg.lstsq(kkt, rhs, rcond=None)[0][:n]
        if ((exact >= low[free] - 1e-12) & (exact <= high[free] + 1e-12)).all():
            polished = lam.copy()
            polished[free] = np.clip(exact, low[free], high[free])
            if polished @ g @ polished <= lam @ g @ lam + 1e-15:
                lam = polished
    return torch.as_tensor(lam, dtype=gram.dtype, device=gram.device)


@register
class FedMGDAPlus(Algorithm):
    """FedMGDA+. Hyperparameters: ``server_lr`` eta > 0 and ``epsilon`` in [0, 1]."""

    name = "fedmgda+"

    def __init__(self, server_lr: float = 1.0, epsilon: float = 0.1):
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)
        self.epsilon = check_number("epsilon", epsilon, low=0.0, high=1.0)

    def client_update(self, task, received, clients, info, result):
        return {}, {"delta": delta(received, result)}

    def server_update(self, server, info, uploads):
        if len(info.clients) == 0:
            return server
        d = -uploads["delta"]
        norms = d.norm(dim=1, keepdim=True)
        g = d / torch.where(norms > 0, norms, torch.ones_like(norms))
        w = info.active_weights.to(g.dtype)
        center = w / w.sum()
        if not torch.isfinite(g).all():  # a diverging run: no QP to solve; the model goes non-finite, the run stops
            return dataclasses.replace(server, x=server.x - self.server_lr * (center @ g))
        lam = min_norm_weights((g @ g.T).double(), center.double(), self.epsilon).to(g.dtype)
        return dataclasses.replace(server, x=server.x - self.server_lr * (lam @ g))
