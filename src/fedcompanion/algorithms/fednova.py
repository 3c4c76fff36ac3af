r"""FedNova (Wang et al., NeurIPS 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous
Federated Optimization"): normalised averaging.

Client i runs :math:`\tau_i = Q_i` local SGD steps (heavy-ball momentum :math:`\mu` allowed) and uploads
:math:`\Delta_i = x_i - x` and its normaliser :math:`a_i = \|\mathbf a_i\|_1`, the sum of the weights its local
steps give the gradients:

.. math::
    a_i = \tau_i \quad\text{(SGD)},\qquad
    a_i = \frac{1}{1-\mu}\Big(\tau_i - \mu\,\frac{1 - \mu^{\tau_i}}{1-\mu}\Big) \quad\text{(momentum SGD)}.

With :math:`q_i = w_i / \sum_{j\in A} w_j`, the server takes

.. math::  x \leftarrow x + \eta_g\, \tau_{\mathrm{eff}} \sum_{i\in A} q_i \frac{\Delta_i}{a_i},\qquad
           \tau_{\mathrm{eff}} = \sum_{i\in A} q_i a_i,

so that clients doing more steps do not pull the model towards their own optimum. With equal :math:`\tau_i`
it is FedAvg. The momentum normaliser assumes a buffer that starts each round at zero (``LocalWork``'s
default); with a carried buffer it is an approximation.
"""
from __future__ import annotations

import dataclasses

import torch

from ..validation import check_number
from .base import Algorithm, delta, register


def normaliser(steps: torch.Tensor, momentum: float) -> torch.Tensor:
    """a_i = ||a_i||_1 for tau_i local steps of SGD with heavy-ball momentum mu."""
    tau = steps.to(torch.float64)
    if momentum == 0:
        return tau
    mu = momentum
    return (tau - mu * (1 - mu**tau) / (1 - mu)) / (1 - mu)


@register
class FedNova(Algorithm):
    """FedNova. Hyperparameter: ``server_lr`` eta_g > 0."""

    name = "fednova"

    def __init__(self, server_lr: float = 1.0):
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)

    def client_update(self, task, received, clients, info, result):
        a = normaliser(result.objective.steps, result.objective.momentum).to(result.x)
        return {}, {"delta": delta(received, result), "a": a}

    def server_update(self, server, info, uploads):
        if len(info.clients) == 0:
            return server
        d, a = uploads["delta"], uploads["a"]
        q = info.active_weights.to(d.dtype)
        q = q / q.sum()
        tau_eff = q @ a
        return dataclasses.replace(server, x=server.x + self.server_lr * tau_eff * ((q / a) @ d))
