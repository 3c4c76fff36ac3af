r"""The batched engine: all active clients' local steps as one vectorised computation.

The K active clients' models are trained together. At local step t each client still working (t <
Q_k) takes the loop engine's step (:mod:`.loop`),

.. math::  d_k = s_k \nabla f_k(x_k; B_k^t) + c_k + \rho_k (x_k - z_k) + \omega x_k,\qquad
           b_k \leftarrow \mu b_k + d_k,\qquad x_k \leftarrow x_k - \eta_k b_k .

The mini-batch losses of all these clients come from one ``torch.func.vmap`` of the model over the
clients' parameters and are differentiated together. Each client's batch is padded to the largest
batch size B, with weight 1/B_k on its real rows and 0 on padding, so each mean is exact. Clients
are processed longest-working first, so at step t the clients still working are a prefix of the
batch and a finished client costs nothing. During the local steps the parameters are kept as one [K,
...] tensor per layer, in the memory layout of their gradients, so that the updates are streaming
in-place operations; they are flattened back to [K, P] once at the end. The mini-batches are those
of :func:`~.schedule.batch_indices`, so the trajectory is the loop engine's up to floating-point
summation order: in float64 the two agree to ~1e-16; in float32 they agree to ~1e-7 per round until
a ReLU pre-activation close to zero changes sign in one engine and not the other, after which a
client's trajectory may differ by ~1e-4 (the tests compare the engines in float64).
"""
from __future__ import annotations

import torch
from torch.func import functional_call, vmap

from ..protocol import LocalObjective
from .schedule import batch_indices, batch_size_for


def _layer_grads(task, params: dict, inputs, targets, weights, l2, with_loss: bool = False):
    """Per-layer gradients of each client's f_k = sum_j weights[k, j] loss_j + l2_k/2 ||x_k||^2 (and f_k).

    ``params`` maps each layer name to a [K, ...] tensor; returns a dict of [K, ...] gradients, and
    with ``with_loss`` also the [K] values (the probe needs them; the local steps do not).
    """
    leaves = {n: p.detach().requires_grad_(True) for n, p in params.items()}
    out = vmap(lambda p, inp: functional_call(task.model, p, (inp,)))(leaves, inputs)
    k, b = targets.shape[:2]
    per_sample = task.loss.per_sample(out.reshape(k * b, *out.shape[2:]), targets.reshape(k * b, *targets.shape[2:]))
    losses = (per_sample.reshape(k, b) * weights).sum(1)
    grads = dict(zip(leaves, torch.autograd.grad(losses.sum(), list(leaves.values()))))
    regularised = bool((l2 != 0).any())
    if regularised:
        for n, p in params.items():
            grads[n].add_(p * _per_client(l2, p))
    if not with_loss:
        return grads
    if regularised:
        losses = losses + 0.5 * l2 * sum((p * p).flatten(1).sum(1) for p in params.values())
    return grads, losses.detach()


def _batches(task, clients, steps, seed: int, round: int, batch_size: int | None):
    """Row indices [K, Q, B] into each client's own data and weights [K, Q, B] (1/B_k on real rows, 0 on
    padding)."""
    sizes = task.client_sizes[clients].tolist()
    widths = [batch_size_for(n, batch_size) for n in sizes]
    k, q, b = len(sizes), int(steps.max()), max(widths)
    rows = torch.zeros(k, q, b, dtype=torch.long)
    weights = torch.zeros(k, q, b, dtype=task.dtype)
    for j, (i, n, w, qi) in enumerate(zip(clients.tolist(), sizes, widths, steps.tolist())):
        rows[j, :qi, :w] = batch_indices(seed, round, i, n, qi, batch_size)
        weights[j, :qi, :w] = 1.0 / w
    return rows.to(task.device), weights.to(task.device)


def _targets(task, objective: LocalObjective, clients) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the targets come from: (a tensor laid out like ``task.y_all``, each active client's offset in it)."""
    if objective.targets is None:
        return task.y_all, task.offsets[clients].to(task.device)
    sizes = torch.tensor([len(t) for t in objective.targets])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)[:-1]])
    return torch.cat(objective.targets), offsets.to(task.device)


def _per_client(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a [K] vector so that it broadcasts against a [K, ...] layer tensor."""
    return v.view(-1, *([1] * (like.dim() - 1)))


def _relayout(tensors: dict, like: dict) -> dict:
    """Copies of ``tensors`` with the strides of ``like`` (weight gradients come transposed, and
    in-place updates between tensors of different layouts are several times slower)."""
    return {n: torch.empty_like(like[n]).copy_(v) for n, v in tensors.items()}


def _flat(params: dict, order: torch.Tensor) -> torch.Tensor:
    """The per-layer [K, ...] tensors back to [K, P], in the caller's client order."""
    x = torch.cat([p.flatten(1) for p in params.values()], dim=1)
    out = torch.empty_like(x)
    out[order] = x
    return out


def train_batched(task, objective: LocalObjective, clients, *, seed: int, round: int,
                  batch_size: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Batched engine: returns x_k^{Q_k} [K, P] and the final momentum buffers (``None`` without momentum)."""
    momentum = objective.momentum != 0
    if len(clients) == 0:
        return objective.start.clone(), (objective.start.clone() if momentum else None)
    order = torch.argsort(objective.steps, descending=True, stable=True)
    steps = objective.steps[order]
    rows, weights = _batches(task, clients[order], steps, seed, round, batch_size)
    y_source, y_offsets = _targets(task, objective, clients)
    x_offsets = task.offsets[clients[order]].to(task.device)
    y_offsets = y_offsets[order]
    params = {n: p.contiguous() for n, p in task.unflatten(objective.start[order]).items()}
    buffers = None
    if momentum:
        start = objective.momentum_buffer
        buffers = task.unflatten(torch.zeros_like(objective.start) if start is None else start[order].clone())
    lr, scale, prox = objective.lr[order], objective.scale[order], objective.prox[order]
    l2 = task.client_l2[clients[order]].to(task.device, task.dtype)
    use_scale, use_prox, decay = bool((scale != 1).any()), bool((prox != 0).any()), objective.weight_decay
    # grad h = s g + rho x + (c - rho z): the bracket is constant over the local steps
    offset = None
    if objective.linear is not None or use_prox:
        offset = torch.zeros_like(objective.start) if objective.linear is None else objective.linear.clone()
        if use_prox:
            offset -= objective.prox[:, None] * objective.anchor
        offset = task.unflatten(offset[order])
    for t in range(int(steps[0])):
        n = int((steps > t).sum())  # the clients still working: a prefix
        live = {name: p[:n] for name, p in params.items()}
        local = rows[:n, t]
        inputs = task.x_all[local + x_offsets[:n, None]]
        targets = y_source[local + y_offsets[:n, None]]
        grads = _layer_grads(task, live, inputs, targets, weights[:n, t], l2[:n])
        if t == 0:  # store every [K, ...] tensor in the memory layout autograd gives the gradients
            params = live = _relayout(params, grads)
            offset = None if offset is None else _relayout(offset, grads)
            buffers = None if buffers is None else _relayout(buffers, grads)
        for name, p in live.items():
            d = grads[name]
            if use_scale:
                d.mul_(_per_client(scale[:n], d))
            if offset is not None:
                d.add_(offset[name][:n])
            if use_prox:  # x - eta (d + rho x) = (1 - eta rho) x - eta d
                if buffers is None:
                    p.mul_(_per_client(1 - lr[:n] * prox[:n], p))
                else:
                    d.add_(p * _per_client(prox[:n], p))
            if decay:
                d.add_(p, alpha=decay)
            if buffers is not None:
                d = buffers[name][:n].mul_(objective.momentum).add_(d)
            p.sub_(d * _per_client(lr[:n], d))  # in place: p is a view of params
    return _flat(params, order), (None if buffers is None else _flat(buffers, order))


def probe_batched(task, x0: torch.Tensor, clients) -> tuple[torch.Tensor, torch.Tensor]:
    """(f_i(x0), grad f_i(x0)) on each listed client's full data, all clients at once."""
    k = len(clients)
    if k == 0:
        return x0.new_zeros(0), x0.new_zeros(0, len(x0))
    rows, weights = _batches(task, clients, torch.ones(k, dtype=torch.long), 0, 0, None)
    rows = rows[:, 0] + task.offsets[clients].to(task.device)[:, None]
    params = {n: p.expand(k, *p.shape) for n, p in task.unflatten(x0).items()}
    l2 = task.client_l2[clients].to(task.device, task.dtype)
    grads, losses = _layer_grads(task, params, task.x_all[rows], task.y_all[rows], weights[:, 0], l2, with_loss=True)
    return losses, torch.cat([g.flatten(1) for g in grads.values()], dim=1)
