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

For multilayer perceptrons (``nn.Sequential`` of ``Linear`` and ``ReLU`` layers, an optional leading
``Flatten``; linear and logistic models included) with a cross-entropy, logistic or squared loss, and one
step size, proximal weight and loss scale for all clients (the usual case), the forward and backward
passes are written out as batched matrix products, and each weight and bias update is fused into its
gradient's product (``W.baddbmm_(delta^T, a, beta=1 - eta * decay, alpha=-eta * s)``, the bias with
``delta^T 1``): the gradients are never stored and each layer is streamed once per step instead of three
times. Without momentum, the constant offset c - rho z is subtracted right after each layer's product, a few
clients at a time, while their block is still in cache; with momentum, what is left of a step is one
``torch._foreach_*`` call per operation over all layers. A step costs a few calls per layer: the step count, not
the arithmetic, bounds small problems. That is the path on a GPU. On a CPU the same MLP steps run one client at a
time per thread instead (:mod:`.clientwise`), each client's parameters staying in its core's cache over all its
steps: faster than the batched products there for FedAvg and FedVRA (README's engine table, from
``benchmarks/engine.py``; its ``batched products`` column runs ``engine="batched-products"``). Other models go
through ``torch.func.vmap`` and autograd.

One statement of the step, three kernels with one signature, chosen by ``train_batched``'s ``kernel`` argument (as
torch.optim chooses between its single-tensor, ``foreach`` and ``fused`` kernels): ``"clientwise"`` and
``"products"`` (MLPs only) and ``"autograd"`` (any model); ``"auto"`` takes the fastest that applies. The driver's
engines ``"batched"``, ``"batched-clientwise"`` and ``"batched-products"`` are this function with ``"auto"`` and the
two MLP kernels.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.func import functional_call, vmap

from ..protocol import LocalObjective
from ..validation import ConfigError, check_choice
from .clientwise import clientwise_steps
from .products import mlp_layers, mlp_steps
from .schedule import batch_indices, batch_size_for

KERNELS = ("auto", "clientwise", "products", "autograd")


def _layer_grads(task, params: dict, inputs, targets, weights, l2):
    """Per-layer gradients of each client's f_k = sum_j weights[k, j] loss_j + l2_k/2 ||x_k||^2.

    ``params`` maps each layer name to a [K, ...] tensor; returns a dict of [K, ...] gradients.
    """
    leaves = {n: p.detach().requires_grad_(True) for n, p in params.items()}
    out = vmap(lambda p, inp: functional_call(task.model, p, (inp,)))(leaves, inputs)
    k, b = targets.shape[:2]
    per_sample = task.loss.per_sample(out.reshape(k * b, *out.shape[2:]), targets.reshape(k * b, *targets.shape[2:]))
    losses = (per_sample.reshape(k, b) * weights).sum(1)
    grads = dict(zip(leaves, torch.autograd.grad(losses.sum(), list(leaves.values()))))
    if bool((l2 != 0).any()):
        for n, p in params.items():
            grads[n].add_(p * _rowwise(l2, p))
    return grads


def _batches(task, clients, steps, seed: int, round: int, batch_size: int | None):
    """Row indices [K, Q, B] into each client's own data, weights [K, Q, B] (1/B_k on real rows, 0 on
    padding) and the widths B_k."""
    sizes = task.client_sizes[clients].tolist()
    widths = [batch_size_for(n, batch_size) for n in sizes]
    k, q, b = len(sizes), int(steps.max()), max(widths)
    rows = torch.zeros(k, q, b, dtype=torch.long)
    weights = torch.zeros(k, q, b, dtype=task.dtype)
    for j, (i, n, w, qi) in enumerate(zip(clients.tolist(), sizes, widths, steps.tolist())):
        rows[j, :qi, :w] = batch_indices(seed, round, i, n, qi, batch_size)
        weights[j, :qi, :w] = 1.0 / w
    return rows.to(task.device), weights.to(task.device), widths


def _targets(task, objective: LocalObjective, clients) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the targets come from: (a tensor laid out like ``task.y_all``, each active client's offset in it)."""
    if objective.targets is None:
        return task.y_all, task.offsets[clients].to(task.device)
    sizes = torch.tensor([len(t) for t in objective.targets])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)[:-1]])
    return torch.cat(objective.targets), offsets.to(task.device)


def _rowwise(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a [K] vector so that it broadcasts against a [K, ...] layer tensor."""
    return v.view(-1, *([1] * (like.dim() - 1)))


def _relayout(tensors: dict, like: dict) -> dict:
    """Copies of ``tensors`` with the strides of ``like`` (weight gradients come transposed, and
    in-place updates between tensors of different layouts are several times slower)."""
    return {n: torch.empty_like(like[n]).copy_(v) for n, v in tensors.items()}


def _in_order(task, flat: torch.Tensor, order: torch.Tensor) -> dict:
    """[K, P] (an expanded [P] too) as contiguous per-layer [K, ...] tensors, rows taken in ``order``: one copy."""
    order = order.to(flat.device)
    return {n: v.index_select(0, order) for n, v in task.unflatten(flat).items()}


def _stacked(rows) -> torch.Tensor:
    """[K, P] from a [K, P] tensor or K rows [P]."""
    return rows if isinstance(rows, torch.Tensor) else torch.stack(tuple(rows))


def _zeros_like(tensors: dict) -> dict:
    return {n: torch.zeros_like(v) for n, v in tensors.items()}


def _flat(params: dict, order: torch.Tensor) -> torch.Tensor:
    """The per-layer [K, ...] tensors (rows in ``order``) back to [K, P] in the caller's client order: one copy."""
    first = next(iter(params.values()))
    out = first.new_empty(len(first), sum(p[0].numel() for p in params.values()))
    start, order = 0, order.to(out.device)
    for p in params.values():
        width = p[0].numel()
        out[:, start : start + width].index_copy_(0, order, p.flatten(1))
        start += width
    return out


def _uniform(v: torch.Tensor) -> bool:
    return bool((v == v[0]).all())


@dataclass
class _Round:
    """Everything the local steps of one batched round need, with the clients longest-working first. The
    per-layer tensors (``params``, ``buffers``, ``offset``) are made by :func:`_layer_tensors` for the paths that
    use them; the clientwise path (:mod:`.clientwise`) works on rows of the flat [K, P] tensors instead."""

    order: torch.Tensor        # position in the batch -> position in the caller's client list
    steps: torch.Tensor        # Q_k, descending
    live_counts: list          # how many clients still work at each step t (a prefix of the batch)
    rows: torch.Tensor         # [K, Q, B] each client's mini-batch rows, indices into its own data
    x_offsets: torch.Tensor    # [K] where each client's data starts in task.x_all
    y_offsets: torch.Tensor    # [K] where its targets start in y_source
    weights: torch.Tensor      # [K, Q, B] 1/B_k on real rows, 0 on padding
    widths: list               # B_k: each client's real rows per mini-batch
    y_source: torch.Tensor     # targets laid out back to back
    lr: torch.Tensor
    scale: torch.Tensor
    prox: torch.Tensor
    l2: torch.Tensor
    params: dict | None = None   # layer name -> [K, ...]
    buffers: dict | None = None  # momentum buffers, like params
    offset: dict | None = None   # c - rho z per layer (constant over the steps), or None
    inputs_buffer: torch.Tensor | None = None  # every step's inputs are gathered into it

    @functools.cached_property
    def x_index(self) -> torch.Tensor:
        """[Q, K, B] rows of task.x_all in each client's mini-batch t (step-major)."""
        return (self.rows + self.x_offsets[:, None, None]).transpose(0, 1).contiguous()

    @functools.cached_property
    def y_index(self) -> torch.Tensor:
        """[Q, K, B] the same rows of y_source."""
        return (self.rows + self.y_offsets[:, None, None]).transpose(0, 1).contiguous()

    def shared_coefficients(self, weight_decay: float) -> tuple[float, float, float]:
        """(eta, s, decay) where every client shares eta, s, rho and mu_i: d = s g + decay x + offset, with
        decay = s mu_i + rho + weight decay."""
        s = float(self.scale[0])
        return float(self.lr[0]), s, s * float(self.l2[0]) + float(self.prox[0]) + weight_decay

    def batch(self, t: int, n: int, inputs: torch.Tensor):
        """Mini-batch t of the first n clients: inputs [n, B, ...] and targets [n, B, ...]. The inputs are gathered
        into one buffer, overwritten by the next step (a fresh tensor per step, 0.5 MB for 5 clients' MNIST
        batches, costs its page faults every step)."""
        rows = self.x_index[t, :n].flatten()
        if self.inputs_buffer is None:
            self.inputs_buffer = inputs.new_empty(self.x_index[0].numel(), *inputs.shape[1:])
        x = torch.index_select(inputs, 0, rows, out=self.inputs_buffer[: len(rows)])
        y = self.y_source.index_select(0, self.y_index[t, :n].flatten())
        return x.view(n, -1, *inputs.shape[1:]), y.view(n, -1, *self.y_source.shape[1:])


def _prepare(task, objective: LocalObjective, clients, seed: int, round: int, batch_size: int | None) -> _Round:
    """The round's schedule: clients longest-working first, their mini-batches and coefficients."""
    order = torch.argsort(objective.steps, descending=True, stable=True)
    steps = objective.steps[order]
    rows, weights, widths = _batches(task, clients[order], steps, seed, round, batch_size)
    y_source, y_offsets = _targets(task, objective, clients)
    live_counts = (steps[None, :] > torch.arange(int(steps[0]), device=steps.device)[:, None]).sum(1).tolist()
    return _Round(order, steps, live_counts, rows, task.offsets[clients[order]].to(task.device),
                  y_offsets[order.to(y_offsets.device)], weights, widths, y_source,
                  objective.lr[order], objective.scale[order], objective.prox[order],
                  task.client_l2[clients[order]].to(task.device, task.dtype))


def _layer_tensors(task, objective: LocalObjective, plan: _Round) -> None:
    """The per-layer [K, ...] tensors of ``plan`` (rows in its order): parameters, momentum buffers, offsets."""
    order, prox = plan.order, plan.prox
    plan.params = _in_order(task, objective.start, order)
    if objective.momentum != 0:
        start = objective.momentum_buffer
        plan.buffers = _zeros_like(plan.params) if start is None else _in_order(task, start, order)
    if objective.linear is not None or bool((prox != 0).any()):
        # grad h = s g + rho x + (c - rho z): the bracket is constant over the local steps
        linear = objective.linear
        offset = _zeros_like(plan.params) if linear is None else _in_order(task, _stacked(linear), order)
        anchor, shared = objective.anchor, objective.anchor.stride(0) == 0  # shared: one z (an expanded [P])
        pulls = task.unflatten(anchor[:1]) if shared else _in_order(task, anchor, order)
        rho = prox[:1] if shared and _uniform(prox) else prox
        for name, pull in pulls.items():
            offset[name] -= pull * _rowwise(rho, pull)  # rho z (for a shared z and rho, once), then c - rho z
        plan.offset = offset


def train_batched(task, objective: LocalObjective, clients, *, seed: int, round: int,
                  batch_size: int | None, kernel: str = "auto") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Batched engine: returns x_k^{Q_k} [K, P] and the final momentum buffers (``None`` without momentum).

    ``kernel``: ``"auto"`` (on a CPU, an MLP's clients one per thread; on a GPU, its products batched over the
    clients; any other model through autograd), or one of them by name: ``"clientwise"`` (CPU) and ``"products"``
    need an MLP with a cross-entropy, logistic or squared loss and one step size, proximal weight, loss scale and
    l2 for all clients; ``"autograd"`` takes anything."""
    check_choice("kernel", kernel, KERNELS)
    if len(clients) == 0:
        return objective.start.clone(), (objective.start.clone() if objective.momentum != 0 else None)
    plan = _prepare(task, objective, clients, seed, round, batch_size)
    layers = mlp_layers(task.model)
    fused = layers is not None and task.loss.kernel is not None and all(
        _uniform(v) for v in (plan.lr, plan.scale, plan.prox, plan.l2))
    on_cpu = task.x_all.device.type == "cpu"
    if kernel in ("clientwise", "products") and not (fused and (on_cpu or kernel == "products")):
        raise ConfigError(f"the {kernel!r} kernel needs an MLP with a cross-entropy, logistic or squared loss, one "
                         "step size, proximal weight, loss scale and l2 for all clients"
                         + (" and a CPU" if kernel == "clientwise" else "") + "; kernel='autograd' takes any model")
    if kernel == "clientwise" or (kernel == "auto" and fused and on_cpu):
        return clientwise_steps(task, objective, plan, layers)
    _layer_tensors(task, objective, plan)
    if fused and kernel != "autograd":
        mlp_steps(task, plan, layers, objective.momentum, objective.weight_decay)
    else:
        _autograd_steps(task, plan, objective.momentum, objective.weight_decay)
    return _flat(plan.params, plan.order), (None if plan.buffers is None else _flat(plan.buffers, plan.order))


def _autograd_steps(task, plan: _Round, momentum: float, decay: float) -> None:
    """Local steps of any model: gradients by vmap + autograd, then the update per layer."""
    lr, scale, prox = plan.lr, plan.scale, plan.prox
    use_scale, use_prox, one_lr = not bool((scale == 1).all()), bool((prox != 0).any()), _uniform(lr)
    params, buffers, offset = plan.params, plan.buffers, plan.offset
    for t, n in enumerate(plan.live_counts):
        live = {name: p[:n] for name, p in params.items()}
        grads = _layer_grads(task, live, *plan.batch(t, n, task.x_all), plan.weights[:n, t], plan.l2[:n])
        if t == 0:  # store every [K, ...] tensor in the memory layout autograd gives the gradients
            params = plan.params = live = _relayout(params, grads)
            offset = None if offset is None else _relayout(offset, grads)
            buffers = plan.buffers = None if buffers is None else _relayout(buffers, grads)
        for name, p in live.items():
            d = grads[name]
            if use_scale:
                d.mul_(_rowwise(scale[:n], d))
            if offset is not None:
                d.add_(offset[name][:n])
            if use_prox:  # x - eta (d + rho x) = (1 - eta rho) x - eta d
                if buffers is None:
                    p.mul_(_rowwise(1 - lr[:n] * prox[:n], p))
                else:
                    d.add_(p * _rowwise(prox[:n], p))
            if decay:
                d.add_(p, alpha=decay)
            if buffers is not None:
                d = buffers[name][:n].mul_(momentum).add_(d)
            if one_lr:
                p.sub_(d, alpha=float(lr[0]))
            else:
                p.sub_(d.mul_(_rowwise(lr[:n], d)))  # in place: p is a view of params
