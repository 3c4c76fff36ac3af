"""The stationarity measure of the FedVRA paper's Theorem 1 as a named metric (``metrics=["gradient_norm_sq"]``).

Kept in a module of its own so that a run that records it (and only such a run) has this code in its cache key.
"""
from __future__ import annotations

import torch

from .named_metrics import METRICS


def gradient_norm_sq(task, config):
    r""":math:`\|\nabla F(x)\|^2` with :math:`F = \sum_i w_i f_i` on the clients' full training data (one autograd
    pass per client, in the task's dtype)."""
    def value(x: torch.Tensor) -> float:
        grad = torch.zeros_like(x)
        for i in range(task.num_clients):
            grad += float(task.weights[i]) * task.client_value_and_grad(i, x)[1]
        return float(grad @ grad)
    return value


METRICS.update({"gradient_norm_sq": gradient_norm_sq})
