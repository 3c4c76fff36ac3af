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
the :math:`g_i`) is solved here exactly up to rounding by accelerated projected gradient with the exact
Euclidean projection onto the capped simplex.
"""
from __future__ import annotations

import dataclasses

import torch

from ..protocol import LocalObjective
from ..validation import check_number
from .base import Algorithm, delta, register


def project_capped_simplex(v: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """argmin_{sum z = 1, low <= z <= high} ||z - v||: z = clip(v - theta, low, high) with theta found by
    bisection (the sum is monotone in theta); needs sum(low) <= 1 <= sum(high)."""
    lo, hi = float((v - high).min()) - 1.0, float((v - low).max()) + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if float(torch.clamp(v - mid, low, high).sum()) > 1:
            lo = mid
        else:
            hi = mid
    return torch.clamp(v - 0.5 * (lo + hi), low, high)


def min_norm_weights(gram: torch.Tensor, center: torch.Tensor, epsilon: float, iterations: int = 5000,
                     tol: float = 1e-15) -> torch.Tensor:
    """lambda* = argmin lambda' G lambda over the simplex with ||lambda - center||_inf <= epsilon (FISTA)."""
    low, high = (center - epsilon).clamp_min(0), (center + epsilon).clamp_max(1)
    step = 1.0 / max(float(torch.linalg.eigvalsh(gram)[-1]) * 2, 1e-300)
    lam = project_capped_simplex(center, low, high)
    y, t = lam, 1.0
    for _ in range(iterations):
        new = project_capped_simplex(y - step * 2 * (gram @ y), low, high)
        t_next = (1 + (1 + 4 * t * t) ** 0.5) / 2
        y = new + ((t - 1) / t_next) * (new - lam)
        done = float((new - lam).abs().max()) <= tol
        lam, t = new, t_next
        if done:
            break
    return lam


@register
class FedMGDAPlus(Algorithm):
    """FedMGDA+. Hyperparameters: ``server_lr`` eta > 0 and ``epsilon`` in [0, 1]."""

    name = "fedmgda+"

    def __init__(self, server_lr: float = 1.0, epsilon: float = 0.1):
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)
        self.epsilon = check_number("epsilon", epsilon, low=0.0, high=1.0)

    def local_objective(self, task, received, clients, info):
        return LocalObjective.sgd(received["x"], info.steps, info.lr)

    def client_update(self, task, received, clients, info, result):
        return {}, {"delta": delta(received, result)}

    def server_update(self, server, info, uploads):
        if len(info.clients) == 0:
            return server
        d = -uploads["delta"]
        norms = d.norm(dim=1, keepdim=True)
        g = d / torch.where(norms > 0, norms, torch.ones_like(norms))
        w = info.active_weights.to(g.dtype)
        lam = min_norm_weights((g @ g.T).double(), (w / w.sum()).double(), self.epsilon).to(g.dtype)
        return dataclasses.replace(server, x=server.x - self.server_lr * (lam @ g))
