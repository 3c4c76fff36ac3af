r"""FedAvg (McMahan et al., 2017) and FedProx (Li et al., 2020).

Local work: Q_i steps of SGD on :math:`h_i(x) = f_i(x) + \frac{\mu}{2}\|x - x_0\|^2`
(FedAvg: :math:`\mu = 0`). With :math:`\Delta_i = x_i - x_0` the server step is

.. math::
    \text{normalized:}\quad x_0 \leftarrow x_0 + \eta_g \frac{\sum_{i\in A} w_i \Delta_i}{\sum_{i\in A} w_i}
    \qquad
    \text{unbiased:}\quad x_0 \leftarrow x_0 + \eta_g \sum_{i\in A} \frac{w_i}{p_i}\Delta_i,

``normalized`` is McMahan's weighted average of the sampled models; ``unbiased`` is the
importance-weighted form whose expectation over the sampling is the full-participation update
(the form in which FedProx is a special case of FedVRA).
"""
from __future__ import annotations

from ..engine.local import LocalObjective
from ..validation import check_choice, check_number
from .base import Algorithm, RoundInfo, ServerState, register


@register
class FedAvg(Algorithm):
    name = "fedavg"

    def __init__(self, server_lr: float = 1.0, aggregation: str = "normalized"):
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)
        self.aggregation = check_choice("aggregation", aggregation, ("normalized", "unbiased"))

    def proximal_weight(self) -> float:
        return 0.0

    def local_objective(self, state: ServerState, info: RoundInfo) -> LocalObjective:
        return LocalObjective.sgd(state.x, info.steps, info.lr, prox=self.proximal_weight())

    def aggregate(self, state, info, x_local, probe=None):
        if len(info.clients) == 0:
            return state
        w = info.active_weights.to(x_local.dtype)
        if self.aggregation == "normalized":
            coef = w / w.sum()
        else:
            coef = w / info.probs[info.clients].to(x_local.dtype)
        state.x = state.x + self.server_lr * (coef @ (x_local - state.x))
        return state


@register
class FedProx(FedAvg):
    name = "fedprox"

    def __init__(self, mu: float = 0.01, server_lr: float = 1.0, aggregation: str = "normalized"):
        super().__init__(server_lr, aggregation)
        self.mu = check_number("mu", mu, low=0.0)

    def proximal_weight(self) -> float:
        return self.mu
