r"""SCAFFOLD (Karimireddy et al., ICML 2020), with its unweighted averages.

Local steps with the control variates as a linear correction of the local objective
(:math:`c_i` in the unified objective is :math:`c - c_i`):

.. math::
    y \leftarrow y - \eta\,(g_i(y) - c_i + c), \qquad Q_i \text{ steps from } y = x,

then option I: :math:`c_i^+ = \nabla f_i(x)` (a full local gradient at the server model), or
option II: :math:`c_i^+ = c_i - c + \frac{1}{Q_i\eta}(x - y_i)`. The server, with
:math:`S` the active set,

.. math::
    x \leftarrow x + \eta_g \frac{1}{|S|}\sum_{i\in S}(y_i - x), \qquad
    c \leftarrow c + \frac{1}{N}\sum_{i\in S}(c_i^+ - c_i).

Each active client uploads two vectors (:math:`\Delta y_i, \Delta c_i`) and downloads two
(:math:`x, c`): twice FedAvg's upload, against FedVRA's one vector and one scalar.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine.local import LocalObjective
from ..validation import check_choice, check_number
from .base import Algorithm, ServerState, register


@dataclass
class ScaffoldState(ServerState):
    c: torch.Tensor
    c_clients: torch.Tensor


@register
class Scaffold(Algorithm):
    name = "scaffold"
    upload_vectors = 2
    download_vectors = 2

    def __init__(self, server_lr: float = 1.0, option: str = "II"):
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)
        self.option = check_choice("option", option, ("I", "II"))

    @property
    def needs_probe(self) -> bool:
        return self.option == "I"

    def init(self, task, x0):
        self._n = task.num_clients
        zeros = torch.zeros(self._n, len(x0), dtype=x0.dtype)
        return ScaffoldState(x0.clone(), torch.zeros_like(x0), zeros)

    def local_objective(self, state, info):
        return LocalObjective.sgd(state.x, info.steps, info.lr,
                                  linear=state.c - state.c_clients[info.clients])

    def aggregate(self, state, info, x_local, probe=None):
        s = info.clients
        if len(s) == 0:
            return state
        if self.option == "I":
            c_new = probe[1]
        else:
            scale = (info.steps.to(x_local.dtype) * info.lr)[:, None]
            c_new = state.c_clients[s] - state.c + (state.x - x_local) / scale
        state.c = state.c + (c_new - state.c_clients[s]).sum(0) / self._n
        state.c_clients[s] = c_new
        state.x = state.x + self.server_lr * (x_local - state.x).mean(0)
        return state
