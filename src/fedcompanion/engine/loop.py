r"""The reference engine: each active client in turn, each local step in turn.

Client k starts from :math:`x^0_k` and takes :math:`Q_k` steps on its local objective
:math:`h_k(x) = s_k f_k(x) + \langle c_k, x\rangle + \tfrac{\rho_k}{2}\|x - z_k\|^2`
(:class:`~fedcompanion.protocol.LocalObjective`), in torch.optim.SGD's form:

.. math::  d = \nabla h_k(x; B^t) + \omega x,\qquad b \leftarrow \mu b + d,\qquad x \leftarrow x - \eta_k b

(:math:`\omega`: weight decay, :math:`\mu`: heavy-ball momentum; with :math:`\mu = 0`, plain SGD). The
mini-batches :math:`B^t` are those of :func:`~.schedule.batch_indices`. The parameters are kept per
layer, as in a plain ``nn.Module`` training loop, so the loop costs what such a loop costs.
"""
from __future__ import annotations

import torch

from ..protocol import LocalObjective
from .schedule import batch_indices, batch_size_for


def client_targets(task, objective: LocalObjective, k: int, i: int) -> torch.Tensor:
    """Client i's targets: its stored ones, or those the objective brings (the two-block assignments)."""
    return task.client_data(i)[1] if objective.targets is None else objective.targets[k]


def train_loop(task, objective: LocalObjective, clients, *, seed: int, round: int,
               batch_size: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns x_k^{Q_k} [K, P] and the final momentum buffers [K, P] (``None`` without momentum)."""
    out = torch.empty_like(objective.start)
    buffers = None if objective.momentum == 0 else torch.empty_like(objective.start)
    l2 = task.client_l2
    for k, i in enumerate(clients.tolist()):
        inputs, targets = task.client_data(i)[0], client_targets(task, objective, k, i)
        n, q = len(targets), int(objective.steps[k])
        full_batch = batch_size_for(n, batch_size) == n
        rows = None if full_batch else batch_indices(seed, round, i, n, q, batch_size)
        x = {name: p.clone() for name, p in task.unflatten(objective.start[k]).items()}
        anchor = task.unflatten(objective.anchor[k])
        linear = None if objective.linear is None else task.unflatten(objective.linear[k])
        buf = None
        if buffers is not None:
            start = objective.momentum_buffer
            buf = ({name: torch.zeros_like(p) for name, p in x.items()} if start is None
                   else {name: b.clone() for name, b in task.unflatten(start[k]).items()})
        scale, prox, lr = float(objective.scale[k]), float(objective.prox[k]), float(objective.lr[k])
        for t in range(q):
            batch = (inputs, targets) if full_batch else (inputs[rows[t]], targets[rows[t]])
            grads = task.layer_gradients(x, *batch)
            for name, p in x.items():
                d = grads[name].mul_(scale) if scale != 1 else grads[name]
                if l2[i] != 0:
                    d.add_(p, alpha=float(l2[i]) * scale)
                if linear is not None:
                    d.add_(linear[name])
                if prox != 0:
                    d.add_(p - anchor[name], alpha=prox)
                if objective.weight_decay:
                    d.add_(p, alpha=objective.weight_decay)
                if buf is not None:
                    d = buf[name].mul_(objective.momentum).add_(d)
                p.sub_(d, alpha=lr)
        out[k] = torch.cat([p.reshape(-1) for p in x.values()])
        if buf is not None:
            buffers[k] = torch.cat([b.reshape(-1) for b in buf.values()])
    return out, buffers


def probe_loop(task, x0: torch.Tensor, clients) -> tuple[torch.Tensor, torch.Tensor]:
    """(f_i(x0), grad f_i(x0)) on each listed client's full data: shapes [K] and [K, P]."""
    losses, grads = [], []
    for i in clients.tolist():
        value, grad = task.client_value_and_grad(i, x0)
        losses.append(value)
        grads.append(grad)
    if not losses:
        return x0.new_zeros(0), x0.new_zeros(0, len(x0))
    return torch.stack(losses), torch.stack(grads)
