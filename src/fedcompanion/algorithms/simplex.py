r"""The private block's exact step on the probability simplex, and the clustering objective it minimises.

The row problem of the two-block extension (:mod:`.two_block`), with costs :math:`d_j` (clustering: the squared
distances :math:`d_{jc} = \|a_j - \mu_c\|^2`),

.. math::
    \min_{z \in \Delta_C} \langle d_j, z\rangle + \frac{\tau}{2}\|z\|^2, \qquad z_j = \Pi_{\Delta}(-d_j/\tau),

is a Euclidean projection onto the simplex. Kept apart from the algorithm so that the named metric
``clustering_objective`` (:mod:`fedcompanion.experiments.named_metrics`) does not import the algorithm: a run's cache
key covers the code it imports, and a run that records a metric need not be recomputed when the algorithm changes.
"""
from __future__ import annotations

import torch


def project_rows_to_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of each row of ``v`` onto the probability simplex (sort-based,
    Held et al. 1974 / Duchi et al. 2008): z = max(v - theta, 0) with theta chosen so that sum z = 1."""
    u, _ = torch.sort(v, dim=-1, descending=True)
    css = u.cumsum(-1) - 1
    k = torch.arange(1, v.shape[-1] + 1, dtype=v.dtype, device=v.device)
    support = (u - css / k) > 0
    rho = support.to(v.dtype).cumsum(-1).argmax(-1, keepdim=True)  # last index where the condition holds
    theta = css.gather(-1, rho) / (rho + 1).to(v.dtype)
    return (v - theta).clamp_min(0)


def assignments(distances: torch.Tensor, tau: float) -> torch.Tensor:
    """The exact private-block minimiser: z_j = argmin_{z in simplex} <d_j, z> + tau/2 ||z||^2."""
    return project_rows_to_simplex(-distances / tau)


def clustering_objective(task, x: torch.Tensor, tau: float) -> float:
    """F(x) = sum_i w_i min_{Z_i} f_i(x, Z_i): the objective with every client's assignments optimal."""
    with torch.no_grad():
        d = task.forward(x, task.x_all)
        z = assignments(d, tau)
        per = (z * d).sum(1) + 0.5 * tau * (z * z).sum(1)
        return float(task.weights.to(per) @ task.client_means(per))
