r"""Fairness metrics across clients (the AdaFedAdam paper's evaluation, and the usual extras).

Given each client's loss :math:`F_k` and accuracy :math:`a_k` (on its own held-out split where the task has
one) and its data size :math:`n_k`:

* ``client_loss_mean``, ``client_accuracy_mean``: size-weighted means :math:`\sum_k p_k F_k`, :math:`\sum_k p_k a_k`
  with :math:`p_k = n_k / \sum n`;
* ``client_loss_std``, ``client_accuracy_std``: the (population) standard deviation across clients, as in the
  authors' code (``numpy.std``);
* ``client_loss_worst`` (largest loss), ``client_accuracy_worst`` (smallest accuracy);
* ``client_accuracy_worst10`` and ``client_accuracy_best10``: the mean accuracy of the worst and of the best
  10% of clients (at least one client);
* ``client_accuracy_jain``: Jain's index :math:`(\sum_k a_k)^2 / (N \sum_k a_k^2)`, 1 when all are equal.
"""
from __future__ import annotations

import math

import torch


def fairness(losses: torch.Tensor, accuracies: torch.Tensor, sizes: torch.Tensor) -> dict[str, float]:
    """The metrics above from per-client losses, accuracies and sizes ([N] each)."""
    losses, accuracies, p = losses.double().cpu(), accuracies.double().cpu(), sizes.double().cpu()
    p = p / p.sum()
    out = {
        "client_loss_mean": float(p @ losses),
        "client_loss_std": float(losses.std(unbiased=False)),
        "client_loss_worst": float(losses.max()),
    }
    if torch.isnan(accuracies).all():
        return out
    tail = max(1, math.ceil(0.1 * len(accuracies)))
    ordered = torch.sort(accuracies).values
    square_sum = float((accuracies**2).sum())
    out.update({
        "client_accuracy_mean": float(p @ accuracies),
        "client_accuracy_std": float(accuracies.std(unbiased=False)),
        "client_accuracy_worst": float(ordered[0]),
        "client_accuracy_worst10": float(ordered[:tail].mean()),
        "client_accuracy_best10": float(ordered[-tail:].mean()),
        "client_accuracy_jain": float(accuracies.sum() ** 2 / (len(accuracies) * square_sum)) if square_sum else 1.0,
    })  # fmt: skip
    return out
