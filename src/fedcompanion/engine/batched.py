r"""The batched engine: all active clients' local steps as one vectorised computation.

The K active clients' models are trained together. At local step t each client still working (t <
Q_k) takes

.. math::  x_k \leftarrow x_k - \eta_k\big(s_k \nabla f_k(x_k; B_k^t) + c_k + \rho_k (x_k - z_k)\big).

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

from ..tasks import per_sample_loss
from .local import LocalObjective
from .schedule import batch_indices, batch_size_for


def _layer_grads(task, params: dict, inputs, targets, weights, with_loss: bool = False):
    """Per-layer gradients of each client's weighted loss sum_j weights[k, j] loss_j (and the losses).

    ``params`` maps each layer name to a [K, ...] tensor; returns a dict of [K, ...] gradients, and
    with ``with_loss`` also the [K] loss values (the probe needs them; the local steps do not).
    """
    leaves = {n: p.detach().requires_grad_(True) for n, p in params.items()}
    out = vmap(lambda p, inp: functional_call(task.model, p, (inp,)))(leaves, inputs)
    k, b = targets.shape[:2]
    per_sample = per_sample_loss(task.loss, out.reshape(k * b, *out.shape[2:]),
                                 targets.reshape(k * b, *targets.shape[2:]))
    losses = (per_sample.reshape(k, b) * weights).sum(1)
    grads = dict(zip(leaves, torch.autograd.grad(losses.sum(), list(leaves.values()))))
    if task.l2:
        for n, p in params.items():
            grads[n].add_(p, alpha=task.l2)
    if not with_loss:
        return grads
    if task.l2:
        losses = losses + 0.5 * task.l2 * sum((p * p).flatten(1).sum(1) for p in params.values())
    return grads, losses.detach()


def _batches(task, clients, steps, seed: int, round: int, batch_size: int | None):
    """Global row indices [K, Q, B] and weights [K, Q, B] (1/B_k on real rows, 0 on padding)."""
    sizes = task.client_sizes[clients].tolist()
    widths = [batch_size_for(n, batch_size) for n in sizes]
    k, q, b = len(sizes), int(steps.max()), max(widths)
    rows = torch.zeros(k, q, b, dtype=torch.long)
    weights = torch.zeros(k, q, b, dtype=task.dtype)
    for j, (i, n, w, qi) in enumerate(zip(clients.tolist(), sizes, widths, steps.tolist())):
        rows[j, :qi, :w] = batch_indices(seed, round, i, n, qi, batch_size) + task.offsets[i]
        weights[j, :qi, :w] = 1.0 / w
    return rows, weights


def _per_client(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a [K] vector so that it broadcasts against a [K, ...] layer tensor."""
    return v.view(-1, *([1] * (like.dim() - 1)))


def _relayout(tensors: dict, like: dict) -> dict:
    """Copies of ``tensors`` with the strides of ``like`` (weight gradients come transposed, and
    in-place updates between tensors of different layouts are several times slower)."""
    return {n: torch.empty_like(like[n]).copy_(v) for n, v in tensors.items()}


def train_batched(task, objective: LocalObjective, clients, *, seed: int, round: int,
                  batch_size: int | None) -> torch.Tensor:
    """Batched engine: returns x_k^{Q_k} for the K active clients, shape [K, P]."""
    if len(clients) == 0:
        return objective.start.clone()
    order = torch.argsort(objective.steps, descending=True, stable=True)
    steps = objective.steps[order]
    rows, weights = _batches(task, clients[order], steps, seed, round, batch_size)
    params = {n: p.contiguous() for n, p in task.unflatten(objective.start[order]).items()}
    lr, scale, prox = objective.lr[order], objective.scale[order], objective.prox[order]
    use_scale, use_prox = bool((scale != 1).any()), bool((prox != 0).any())
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
        grads = _layer_grads(task, live, task.x_all[rows[:n, t]], task.y_all[rows[:n, t]], weights[:n, t])
        if t == 0:  # store every [K, ...] tensor in the memory layout autograd gives the gradients
            params = live = _relayout(params, grads)
            offset = None if offset is None else _relayout(offset, grads)
        for name, p in live.items():
            d = grads[name]
            if use_scale:
                d.mul_(_per_client(scale[:n], d))
            if offset is not None:
                d.add_(offset[name][:n])
            if use_prox:  # x - eta (d + rho x) = (1 - eta rho) x - eta d
                p.mul_(_per_client(1 - lr[:n] * prox[:n], p))
            p.sub_(d.mul_(_per_client(lr[:n], d)))  # in place: p is a view of params
    x = torch.cat([p.flatten(1) for p in params.values()], dim=1)
    out = torch.empty_like(x)
    out[order] = x
    return out


def probe_batched(task, x0: torch.Tensor, clients) -> tuple[torch.Tensor, torch.Tensor]:
    """(f_i(x0), grad f_i(x0)) on each listed client's full data, all clients at once."""
    k = len(clients)
    rows, weights = _batches(task, clients, torch.ones(k, dtype=torch.long), 0, 0, None)
    params = {n: p.expand(k, *p.shape) for n, p in task.unflatten(x0).items()}
    grads, losses = _layer_grads(task, params, task.x_all[rows[:, 0]], task.y_all[rows[:, 0]], weights[:, 0],
                                 with_loss=True)
    return losses, torch.cat([g.flatten(1) for g in grads.values()], dim=1)
