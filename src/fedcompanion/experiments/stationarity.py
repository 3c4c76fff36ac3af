"""The stationarity measure of the FedVRA paper's Theorem 1 as a named metric (``metrics=["gradient_norm_sq"]``).

Kept in a module of its own so that a run that records it (and only such a run) has this code in its cache key.
"""
from __future__ import annotations

import torch

from .named_metrics import register_metric


def gradient_norm_sq(task, config):
    r""":math:`\|\nabla F(x)\|^2` with :math:`F(x) = \sum_i w_i f_i(x)` on the clients' full training data, by one
    autograd pass over all of it: sample j of client i enters with weight :math:`w_i / n_i`, and the l2 terms as
    :math:`\tfrac12 \sum_i w_i \mu_i \|x\|^2` (in the task's dtype)."""
    weights = task.weights.to(task.dtype)
    per_sample = torch.repeat_interleave(weights / task.client_sizes.to(task.dtype), task.client_sizes)
    l2 = float(weights.double() @ task.client_l2)

    def value(x: torch.Tensor) -> float:
        leaf = x.detach().requires_grad_(True)
        with torch.enable_grad():
            loss = per_sample @ task.loss.per_sample(task.forward(leaf, task.x_all), task.y_all)
            if l2:
                loss = loss + 0.5 * l2 * (leaf * leaf).sum()
        (grad,) = torch.autograd.grad(loss, leaf)
        return float(grad @ grad)
    return value


register_metric("gradient_norm_sq", gradient_norm_sq)
