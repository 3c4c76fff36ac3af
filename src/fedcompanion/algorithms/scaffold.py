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

import dataclasses
from dataclasses import dataclass

import torch

from ..protocol import LocalObjective, zero_rows
from ..validation import check_choice, check_number
from .base import Algorithm, ServerState, delta, register


@dataclass(frozen=True)
class ScaffoldServer(ServerState):
    c: torch.Tensor
    num_clients: int


@register
class Scaffold(Algorithm):
    """SCAFFOLD. Hyperparameters: ``server_lr`` eta_g > 0, ``option`` ``'I'`` or ``'II'``. Client state: c_i."""

    name = "scaffold"

    def __init__(self, server_lr: float = 1.0, option: str = "II"):
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)
        self.option = check_choice("option", option, ("I", "II"))

    @property
    def needs_probe(self) -> bool:
        return self.option == "I"

    def init_server(self, task, x0):
        return ScaffoldServer(x0.clone(), torch.zeros_like(x0), task.num_clients)

    def init_clients(self, task, x0):
        return {"c": zero_rows(task.num_clients, x0)}

    def broadcast(self, state):
        return {"x": state.server.x, "c": state.server.c}

    def local_objective(self, task, received, clients, info):
        return LocalObjective.sgd(received["x"], info.steps, info.lr, linear=received["c"] - clients["c"])

    def client_update(self, task, received, clients, info, result):
        delta_y = delta(received, result)
        old = clients.entries("c")
        if self.option == "I":
            c_new = tuple(result.probe[1].unbind(0))
        else:  # row by row, each c_i^+ in memory of its own (the state keeps it): no [K, P] temporaries
            scale = (info.steps.to(result.x) * info.lr).unbind(0)
            c_new = tuple(torch.sub(c_i, received["c"]).sub_(torch.div(d, q)) for c_i, d, q in zip(old, delta_y, scale))
        delta_c = torch.stack([torch.sub(new, c_i) for new, c_i in zip(c_new, old)]) if old else delta_y.new_empty(
            delta_y.shape)
        return {"c": c_new}, {"delta_y": delta_y, "delta_c": delta_c}

    def server_update(self, server, info, uploads):
        if len(info.clients) == 0:
            return server
        return dataclasses.replace(
            server, x=server.x + self.server_lr * uploads["delta_y"].mean(0),
            c=server.c + uploads["delta_c"].sum(0) / server.num_clients,
        )  # fmt: skip
