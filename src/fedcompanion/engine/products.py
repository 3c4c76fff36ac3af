"""The batched engine's ``"products"`` kernel: an MLP's local steps for all active clients at once, as batched
matrix products with each weight and bias update fused into its gradient's product (see :mod:`.batched`, whose
round plan it steps: ``plan.params`` and ``plan.buffers`` are [K, ...] per layer, updated in place)."""
from __future__ import annotations

import math

import torch
from torch import nn

from ..losses import Loss


def mlp_layers(model: nn.Module) -> list[tuple[str, str | None]] | None:
    """[(weight name, bias name or None)] per Linear layer if ``model`` is an MLP the fused path handles
    (``Sequential`` of an optional ``Flatten``, then ``Linear`` layers separated by ``ReLU``); else ``None``."""
    if not isinstance(model, nn.Sequential):
        return None
    modules = list(model.named_children())
    if modules and isinstance(modules[0][1], nn.Flatten) and modules[0][1].start_dim == 1:
        modules = modules[1:]
    if not modules or len(modules) % 2 != 1:
        return None
    layers = []
    for j, (name, module) in enumerate(modules):
        if j % 2 == 0 and isinstance(module, nn.Linear):
            layers.append((f"{name}.weight", None if module.bias is None else f"{name}.bias"))
        elif j % 2 == 1 and type(module) is nn.ReLU:
            continue
        else:
            return None
    return layers


def mlp_steps(task, plan, layers, momentum: float, weight_decay: float) -> None:
    """Local steps of an MLP with every client sharing eta, s, rho and mu_i: forward and backward passes as
    batched products, each weight and bias update fused into its gradient's product (a bias gradient is
    delta^T 1).

    Without momentum, x <- (1 - eta decay) x - eta s g is the product; then x <- x - eta o (o: the offset), block
    by block (:func:`_product_then_offset`). With momentum, b <- mu b + s g is the product; then
    b <- b + decay x + o and x <- x - eta b."""
    lr, s, decay = plan.shared_coefficients(weight_decay)
    loss = task.loss
    inputs = task.x_all.reshape(len(task.x_all), -1)
    ones = plan.weights.new_ones(len(plan.steps), plan.weights.shape[2], 1)
    views = _LiveViews(plan, layers)
    for t, n in enumerate(plan.live_counts):
        a, y = plan.batch(t, n, inputs)
        params, buffers, offsets = views(n)
        delta, acts = _mlp_forward(params, a, y, plan.weights[:n, t], loss)
        for j in range(len(params) - 1, -1, -1):
            weight, bias = params[j]
            # the gradient for the layer below, with this layer's weights before their update
            below = _relu_backward(torch.bmm(delta, weight), acts[j]) if j > 0 else None
            delta_t = delta.transpose(1, 2)
            products = ((delta_t, acts[j]), (delta_t, ones[:n]))
            if buffers is None:
                for target, product, offset in zip(params[j], products, offsets[j] if offsets else (None, None)):
                    if target is not None:
                        _product_then_offset(target, product, offset, beta=1 - lr * decay, alpha=-lr * s, lr=lr)
            else:
                for target, product in zip(buffers[j], products):
                    if target is not None:
                        target.baddbmm_(*product, beta=momentum, alpha=s)
            delta = below
        if buffers is not None:
            _momentum_updates(views.flat(n), lr, decay)


def _mlp_forward(params, a, y, weights, loss: Loss):
    """Forward pass of the first n clients' MLPs; returns d loss / d output and each layer's input."""
    acts = []
    for j, (weight, bias) in enumerate(params):
        acts.append(a)
        w = weight.transpose(1, 2)
        a = torch.bmm(a, w) if bias is None else torch.baddbmm(bias.transpose(1, 2), a, w)
        if j + 1 < len(params):
            a = a.clamp_min_(0)
    return loss.output_gradient(a, y, weights), acts


def _relu_backward(grad: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """grad where the ReLU's output is positive, else 0 (one kernel)."""
    return torch.ops.aten.threshold_backward(grad, output, 0)


BLOCK_BYTES = 8 << 20  # a few clients' layer, small enough to stay in cache between the product and the offset


def _product_then_offset(target, product, offset, *, beta: float, alpha: float, lr: float) -> None:
    """target <- beta target + alpha (left @ right), then target <- target - lr offset (no offset: the product
    alone), a block of clients at a time: each block is still in cache when its offset is subtracted, where one
    pass over all n clients (40 MB for 50 clients' first MNIST layer) would read it back from memory. Each client's
    matrices go through the same two operations as in one call of each, so the numbers are the same."""
    left, right = product
    if offset is None:
        target.baddbmm_(left, right, beta=beta, alpha=alpha)
        return
    width = max(1, BLOCK_BYTES // (math.prod(target.shape[1:]) * target.element_size()))
    for lo in range(0, len(target), width):
        block = target[lo : lo + width]
        block.baddbmm_(left[lo : lo + width], right[lo : lo + width], beta=beta, alpha=alpha)
        block.add_(offset[lo : lo + width], alpha=-lr)


def _momentum_updates(flat: tuple, lr: float, decay: float) -> None:
    """With momentum, the part of a step outside the products, over every layer at once (lists of [n, ...] views):
    b <- b + decay x + o, x <- x - eta b."""
    params, buffers, offset = flat
    if decay:
        torch._foreach_add_(buffers, params, alpha=decay)
    if offset is not None:
        torch._foreach_add_(buffers, offset)
    torch._foreach_add_(params, buffers, alpha=-lr)


class _LiveViews:
    """Views of the first n clients' parameters, momentum buffers and offsets, made once per n: per layer
    (weight [n, out, in], bias [n, out, 1] or None), and (:meth:`flat`, for the momentum updates) as flat lists."""

    def __init__(self, plan, layers):
        self.plan, self.layers, self.cache, self.flat_cache = plan, layers, {}, {}

    def _layer_views(self, tensors: dict | None, n: int):
        if tensors is None:
            return None
        return [(tensors[w][:n], None if b is None else tensors[b][:n].unsqueeze(-1)) for w, b in self.layers]

    def __call__(self, n: int):
        if n not in self.cache:
            plan = self.plan
            self.cache[n] = [self._layer_views(d, n) for d in (plan.params, plan.buffers, plan.offset)]
        return self.cache[n]

    def flat(self, n: int):
        if n not in self.flat_cache:
            self.flat_cache[n] = tuple(None if v is None else [x for pair in v for x in pair if x is not None]
                                       for v in self(n))
        return self.flat_cache[n]
