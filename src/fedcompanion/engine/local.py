r"""The unified local objective and the reference (per-client loop) engine that minimises it.

Every algorithm in the three papers asks each active client i to run :math:`Q_i` steps of

.. math::  x^{t+1} = x^t - \eta_i \nabla h_i(x^t),\qquad
           h_i(x) = s_i f_i(x) + \langle c_i, x\rangle + \tfrac{\rho_i}{2}\|x - z_i\|^2,

from :math:`x^0` (usually the global model), with :math:`\nabla f_i` estimated on a mini-batch.
FedAvg: c = 0, rho = 0. FedProx: rho = mu. SCAFFOLD: c = c - c_i. FedADMM/FedVRA/FedDyn:
c = -lambda_i, rho = gamma_i, z = x_0. An algorithm only chooses these; the engine only
minimises them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .schedule import batch_indices, batch_size_for


@dataclass(frozen=True)
class RoundInfo:
    """What the server knows at the start of round r.

    Attributes:
        round: r (0-based).
        clients: active client ids, int64 [K], sorted.
        probs: inclusion probabilities p_i^r of all N clients, [N].
        steps: local step counts Q_i^r of the active clients, int64 [K].
        lr: the client step size eta.
        weights: client weights w_i of all N clients, [N], summing to one.
    """

    round: int
    clients: torch.Tensor
    probs: torch.Tensor
    steps: torch.Tensor
    lr: float
    weights: torch.Tensor

    @property
    def active_weights(self) -> torch.Tensor:
        return self.weights[self.clients]


@dataclass
class LocalObjective:
    r"""h_i for the K active clients, in client order.

    Attributes:
        start: x^0, shape [K, P].
        anchor: z_i, shape [K, P] (the proximal centre).
        prox: rho_i >= 0, shape [K].
        linear: c_i, shape [K, P], or ``None`` for zero.
        scale: s_i, shape [K] (the weight of the data term).
        steps: Q_i, int64 [K].
        lr: eta_i, shape [K].
    """

    start: torch.Tensor
    anchor: torch.Tensor
    prox: torch.Tensor
    linear: torch.Tensor | None
    scale: torch.Tensor
    steps: torch.Tensor
    lr: torch.Tensor

    @classmethod
    def sgd(cls, x0: torch.Tensor, steps: torch.Tensor, lr: float, *, prox: float = 0.0,
            linear: torch.Tensor | None = None) -> LocalObjective:
        """Start and anchor at the global model x0, with a common rho and step size."""
        k = len(steps)
        x = x0.expand(k, -1)
        full = lambda v: torch.full((k,), float(v), dtype=x0.dtype)  # noqa: E731
        return cls(x, x, full(prox), linear, full(1.0), steps, full(lr))

    def direction(self, k: int, x: torch.Tensor, grad_f: torch.Tensor) -> torch.Tensor:
        """grad h_k(x) = s_k grad f_k(x) + c_k + rho_k (x - z_k)."""
        d = self.scale[k] * grad_f
        if self.linear is not None:
            d = d + self.linear[k]
        if self.prox[k] != 0:
            d = d + self.prox[k] * (x - self.anchor[k])
        return d


def train_loop(task, objective: LocalObjective, clients, *, seed: int, round: int,
               batch_size: int | None) -> torch.Tensor:
    """Reference engine: each client in turn, each step in turn. Returns x_i^{Q_i}, shape [K, P]."""
    grad_f = torch.func.grad(task.loss_fn)
    out = torch.empty_like(objective.start)
    for k, i in enumerate(clients.tolist()):
        inputs, targets = task.client_data(i)
        n, q = len(targets), int(objective.steps[k])
        full_batch = batch_size_for(n, batch_size) == n
        batches = None if full_batch else batch_indices(seed, round, i, n, q, batch_size)
        x = objective.start[k].clone()
        for t in range(q):
            if full_batch:
                g = grad_f(x, inputs, targets)
            else:
                g = grad_f(x, inputs[batches[t]], targets[batches[t]])
            x = x - objective.lr[k] * objective.direction(k, x, g)
        out[k] = x
    return out


def probe_loop(task, x0: torch.Tensor, clients) -> tuple[torch.Tensor, torch.Tensor]:
    """(f_i(x0), grad f_i(x0)) on each listed client's full data: shapes [K] and [K, P]."""
    value_and_grad = torch.func.grad_and_value(task.loss_fn)
    losses, grads = [], []
    for i in clients.tolist():
        g, v = value_and_grad(x0, *task.client_data(i))
        losses.append(v)
        grads.append(g)
    return torch.stack(losses), torch.stack(grads)
