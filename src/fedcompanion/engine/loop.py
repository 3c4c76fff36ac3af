r"""The reference engine: each active client in turn, each local step in turn.

Client k starts from :math:`x^0_k` and takes :math:`Q_k` steps on its local objective
:math:`h_k(x) = s_k f_k(x) + \langle c_k, x\rangle + \tfrac{\rho_k}{2}\|x - z_k\|^2`
(:class:`~fedcompanion.protocol.LocalObjective`), in torch.optim.SGD's form:

.. math::  d = \nabla h_k(x; B^t) + \omega x,\qquad b \leftarrow \mu b + d,\qquad x \leftarrow x - \eta_k b

(:math:`\omega`: weight decay, :math:`\mu`: heavy-ball momentum; with :math:`\mu = 0`, plain SGD). The
mini-batches :math:`B^t` are those of :func:`~.schedule.batch_indices`. Each client trains a copy of the
task's ``nn.Module`` exactly as a plain torch training loop would (forward, ``autograd``, an in-place update
of each parameter), so the loop costs what such a loop costs.
"""
from __future__ import annotations

import copy

import torch
from torch.nn.utils import parameters_to_vector

from ..protocol import LocalObjective
from .schedule import batch_indices, batch_size_for


def client_targets(task, objective: LocalObjective, k: int, i: int) -> torch.Tensor:
    """Client i's targets: its stored ones, or those the objective brings (the two-block assignments)."""
    return task.client_data(i)[1] if objective.targets is None else objective.targets[k]


def train_loop(task, objective: LocalObjective, clients, *, seed: int, round: int,
               batch_size: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns x_k^{Q_k} [K, P] and the final momentum buffers [K, P] (``None`` without momentum).

    Each client trains a private copy of the task's model (the task's own module is never changed)."""
    out = torch.empty_like(objective.start)
    buffers = None if objective.momentum == 0 else torch.empty_like(objective.start)
    model = copy.deepcopy(task.model)
    params = list(model.parameters())
    l2 = task.client_l2
    for k, i in enumerate(clients.tolist()):
        inputs, targets = task.client_data(i)[0], client_targets(task, objective, k, i)
        n, q = len(targets), int(objective.steps[k])
        full_batch = batch_size_for(n, batch_size) == n
        rows = None if full_batch else batch_indices(seed, round, i, n, q, batch_size)
        with torch.no_grad():  # copy (torch's vector_to_parameters would alias the start vector)
            torch._foreach_copy_(params, _layers(objective.start[k], params))
        anchor = _layers(objective.anchor[k], params)
        linear = None if objective.linear is None else _layers(objective.linear[k], params)
        buf = None
        if buffers is not None:
            start = objective.momentum_buffer
            buf = [torch.zeros_like(p) for p in params] if start is None else _layers(start[k], params, copy=True)
        scale, prox, lr = float(objective.scale[k]), float(objective.prox[k]), float(objective.lr[k])
        decay = float(l2[i]) * scale + objective.weight_decay  # f_i's own l2 term, and the optimiser's decay
        plain = scale == 1 and not decay and linear is None and not prox and buf is None
        for t in range(q):
            x_t, y_t = (inputs, targets) if full_batch else (inputs[rows[t]], targets[rows[t]])
            grads = torch.autograd.grad(task.loss.per_sample(model(x_t), y_t).mean(), params)
            with torch.no_grad():
                if plain:  # plain SGD: one fused update of every layer
                    torch._foreach_add_(params, grads, alpha=-lr)
                    continue
                for j, (p, d) in enumerate(zip(params, grads)):
                    if scale != 1:
                        d = d.mul(scale)
                    if decay:
                        d = d.add(p, alpha=decay)
                    if linear is not None:
                        d = d.add(linear[j])
                    if prox:
                        d = d.add(p - anchor[j], alpha=prox)
                    if buf is not None:
                        d = buf[j].mul_(objective.momentum).add_(d)
                    p.sub_(d, alpha=lr)
        out[k] = parameters_to_vector(params).detach()
        if buf is not None:
            buffers[k] = torch.cat([b.reshape(-1) for b in buf])
    return out, buffers


def _layers(flat: torch.Tensor, like: list[torch.Tensor], copy: bool = False) -> list[torch.Tensor]:
    """A flat [P] vector viewed (or copied) as tensors shaped like the model's parameters."""
    views, start = [], 0
    for p in like:
        v = flat[start : start + p.numel()].view_as(p)
        views.append(v.clone() if copy else v)
        start += p.numel()
    return views


def probe_loop(task, x0: torch.Tensor, clients, samples: int | None = None, seed: int = 0, round: int = 0,
               gradient: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(f_i(x0), grad f_i(x0)) of each listed client, [K] and [K, P]: on its full data, or (``samples``) on a
    random subset of that many rows drawn from the seeded mini-batch stream of (seed, round, client).
    ``gradient=False``: the losses only (a forward pass each, the same values bit for bit) and ``None``."""
    losses, grads = [], []
    for i in clients.tolist():
        rows = None
        if samples is not None and samples < int(task.client_sizes[i]):
            rows = batch_indices(seed, round, i, int(task.client_sizes[i]), 1, samples)[0]
        if gradient:
            value, grad = task.client_value_and_grad(i, x0, rows)
            grads.append(grad)
        else:
            with torch.no_grad():
                value = task.client_loss(i, x0, rows)
        losses.append(value)
    if not losses:
        return x0.new_zeros(0), (x0.new_zeros(0, len(x0)) if gradient else None)
    return torch.stack(losses), (torch.stack(grads) if gradient else None)
