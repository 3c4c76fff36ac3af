r"""FedAvgM: FedAvg with server momentum (Hsu, Qi and Brown, 2019, "Measuring the effects of non-identical data
distribution for federated visual classification").

Local work and uploads are FedAvg's (:math:`\Delta_i = x_i - x_0`). With the weighted mean of the uploads
:math:`\bar\Delta_t = \sum_{i\in A} c_i \Delta_i` (FedAvg's ``normalized`` or ``unbiased`` coefficients), the
server keeps a momentum buffer :math:`v` (:math:`v_{-1} = 0`) and steps

.. math::
    v_t = \beta\, v_{t-1} + \bar\Delta_t, \qquad x_{t+1} = x_t + \eta_g\, v_t,

i.e. heavy-ball SGD on the pseudo-gradient :math:`g_t = -\bar\Delta_t`. With :math:`\beta = 0` it is FedAvg,
bit for bit. Over many rounds of a constant :math:`\bar\Delta` the step approaches
:math:`\eta_g \bar\Delta / (1 - \beta)`: the effective server learning rate is :math:`\eta_g / (1 - \beta)`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..validation import check_number
from .base import ServerState, register
from .fedavg import FedAvg, weighted_mean_of_updates


@dataclass(frozen=True)
class MomentumState(ServerState):
    """x and the server's momentum buffer v [P]."""

    v: torch.Tensor


@register
class FedAvgM(FedAvg):
    """FedAvgM. Hyperparameters: ``server_lr`` eta_g > 0, ``momentum`` beta in [0, 1), ``aggregation``."""

    name = "fedavgm"

    def __init__(self, server_lr: float = 1.0, momentum: float = 0.9, aggregation: str = "normalized"):
        super().__init__(server_lr, aggregation)
        self.momentum = check_number("momentum", momentum, low=0.0, high=0.999999999)

    def init_server(self, task, x0):
        return MomentumState(x0.clone(), torch.zeros_like(x0))

    def server_update(self, server, info, uploads):
        if len(info.clients) == 0:
            return server
        v = self.momentum * server.v + weighted_mean_of_updates(info, uploads["delta"], self.aggregation)
        return dataclasses.replace(server, x=server.x + self.server_lr * v, v=v)
