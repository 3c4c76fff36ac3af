r"""q-FedAvg (Li, Sanjabi, Beirami & Smith, ICLR 2020, "Fair Resource Allocation in Federated Learning").

It minimises :math:`\sum_k p_k F_k(x)^{q+1}/(q+1)`. Client k runs FedAvg's local SGD from :math:`x^t` to
:math:`\bar x_k`, and with the Lipschitz estimate :math:`L = 1/\eta` (the local learning rate) uploads

.. math::
    \Delta_k = F_k(x^t)^q\, L\,(x^t - \bar x_k), \qquad
    h_k = q\, F_k(x^t)^{q-1} L^2 \|x^t - \bar x_k\|^2 + L\, F_k(x^t)^q,

(one vector, one scalar; :math:`F_k(x^t)` on the client's training data, the engine's probe), and the server
takes :math:`x^{t+1} = x^t - \sum_k \Delta_k / \sum_k h_k`. With q = 0 this is the plain average of the
participants' models. For q > 0, a client at loss :math:`F_k(x^t) = 0` contributes :math:`\Delta_k = 0` and
:math:`h_k = 0` (the limit of both terms; the first one's :math:`0^{q-1} \cdot 0` is undefined for q < 1), and a
round whose :math:`\sum_k h_k` is 0 (every participant at loss 0) leaves the model where it is. (The paper's clients
are sampled with probability proportional to :math:`p_k` and averaged uniformly; use ``sampling='weighted'`` for
that.)
"""
from __future__ import annotations

import dataclasses

import torch

from ..validation import check_number
from .base import Algorithm, register


@register
class QFedAvg(Algorithm):
    """q-FedAvg. Hyperparameter: ``q`` >= 0 (q = 0: no fairness weighting)."""

    name = "qfedavg"
    needs_probe = True
    probe_gradient = False  # F_k(x^t) only

    def __init__(self, q: float = 1.0):
        self.q = check_number("q", q, low=0.0)

    def client_update(self, task, received, clients, info, result):
        lipschitz = 1.0 / info.lr
        losses = result.probe[0].clamp_min(0)
        step = lipschitz * (received["x"] - result.x)  # Delta w_k = L (x^t - x_k)
        f_q = losses**self.q
        if self.q:
            curvature = self.q * losses ** (self.q - 1) * (step * step).sum(1)
            h = torch.where(losses > 0, curvature, torch.zeros_like(curvature))
        else:
            h = torch.zeros_like(losses)
        return {}, {"delta": f_q[:, None] * step, "h": h + lipschitz * f_q}

    def server_update(self, server, info, uploads):
        total = uploads["h"].sum()
        if len(info.clients) == 0 or total == 0:
            return server
        return dataclasses.replace(server, x=server.x - uploads["delta"].sum(0) / total)
