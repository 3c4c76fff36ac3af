r"""FedAvg (McMahan et al., 2017) and FedProx (Li et al., 2020).

Local work: Q_i steps of SGD on :math:`h_i(x) = f_i(x) + \frac{\mu}{2}\|x - x_0\|^2`
(FedAvg: :math:`\mu = 0`). Each active client uploads :math:`\Delta_i = x_i - x_0`; the server step is

.. math::
    \text{normalized:}\quad x_0 \leftarrow x_0 + \eta_g \frac{\sum_{i\in A} w_i \Delta_i}{\sum_{i\in A} w_i}
    \qquad
    \text{unbiased:}\quad x_0 \leftarrow x_0 + \eta_g \sum_{i\in A} \frac{w_i}{p_i}\Delta_i,

``normalized`` is McMahan's weighted average of the sampled models; ``unbiased`` is the
importance-weighted form whose expectation over the sampling is the full-participation update
(the form in which FedProx is a special case of FedVRA). The server step is ``sgd(server_lr)`` on the
pseudo-gradient :math:`g = -\sum_{i\in A} c_i \Delta_i` (:mod:`~fedcompanion.algorithms.server_optimizers`).
"""
from __future__ import annotations

from ..protocol import LocalObjective
from ..validation import check_choice, check_number
from .base import delta, register
from .server_optimizers import ServerOptimized, sgd


def weighted_mean_of_updates(info, updates, aggregation: str):
    """sum_{i in A} c_i Delta_i with c_i = w_i / sum_A w (normalized) or w_i / p_i (unbiased)."""
    w = info.active_weights.to(updates.dtype)
    coef = w / w.sum() if aggregation == "normalized" else w / info.active_probs.to(updates.dtype)
    return coef @ updates


@register
class FedAvg(ServerOptimized):
    """FedAvg. Hyperparameters: ``server_lr`` eta_g > 0, ``aggregation`` ``'normalized'`` or ``'unbiased'``."""

    name = "fedavg"

    def __init__(self, server_lr: float = 1.0, aggregation: str = "normalized"):
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)
        self.aggregation = check_choice("aggregation", aggregation, ("normalized", "unbiased"))

    def proximal_weight(self) -> float:
        """rho of the local objective: 0 (FedProx: mu)."""
        return 0.0

    def local_objective(self, task, received, clients, info):
        return LocalObjective.sgd(received["x"], info.steps, info.lr, prox=self.proximal_weight())

    def client_update(self, task, received, clients, info, result):
        return {}, {"delta": delta(received, result)}

    def server_optimizer(self):
        return sgd(self.server_lr)

    def pseudo_gradient(self, info, uploads):
        return -weighted_mean_of_updates(info, uploads["delta"], self.aggregation)


@register
class FedProx(FedAvg):
    """FedProx: FedAvg's server with the proximal weight ``mu`` >= 0 in the local objective."""

    name = "fedprox"

    def __init__(self, mu: float = 0.01, server_lr: float = 1.0, aggregation: str = "normalized"):
        super().__init__(server_lr, aggregation)
        self.mu = check_number("mu", mu, low=0.0)

    def proximal_weight(self) -> float:
        return self.mu
