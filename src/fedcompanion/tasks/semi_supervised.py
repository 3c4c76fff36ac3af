r"""Federated semi-supervised classification: a few labelled rows per client, the rest unlabelled.

Every training row carries a row of class weights :math:`z_j` on the probability simplex: one-hot for a labelled
row, zeros for an unlabelled one, whose weights (its pseudo-labels) are the private block that
:class:`~fedcompanion.algorithms.two_block.TwoBlock` keeps on each client. The loss is the cross-entropy against
those weights, :math:`\ell_j(x) = -\sum_c z_{jc}\log\mathrm{softmax}_c(\mathrm{out}_j)`, so the objective is

.. math::
    \min_{x,\ Z_i} \sum_i w_i \frac{1}{n_i}\sum_{j\in D_i}\Big(\sum_c z_{jc}\,\ell_{jc}(x)
        + [j \text{ unlabelled}]\,\tfrac{\tau}{2}\|z_j\|^2\Big),
    \qquad \ell_{jc}(x) = -\log\mathrm{softmax}_c(\mathrm{out}_j),

with the labelled rows' :math:`z_j` fixed to their labels and the unlabelled rows' on the simplex: the
semi-supervised form of the FedVRA paper's two-block extension (our reconstruction; its equations are not in our
extract).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from ..data.loaders import ArrayDataset
from ..losses import Loss, register_loss
from ..models import mlp_model
from ..validation import ConfigError, check_number
from .builders import TASKS, _split
from .core import Task, from_client_arrays


class SoftLabels(Loss):
    """Cross-entropy against a row of class weights on the simplex (one-hot: a labelled row; zeros: an unlabelled
    row, which scores 0 until the two-block algorithm gives it pseudo-labels). On integer labels (the test set) it
    is the usual cross-entropy."""

    name = "soft_labels"
    labelled = True
    target_ndim = 2
    private_block = True

    def per_sample(self, out, y):
        return -(y * F.log_softmax(out, -1)).sum(-1)

    def costs(self, out: torch.Tensor) -> torch.Tensor:
        """l_jc = -log softmax_c(out_j): each row's loss for each class, what a pseudo-label weighs, [n, C]."""
        return -F.log_softmax(out, -1)

    def evaluate(self, out, y):
        if y.ndim == 1:
            return F.cross_entropy(out, y.long(), reduction="none")
        return self.per_sample(out, y)

    def correct(self, out, y):
        if y.ndim == 1:
            return (out.argmax(-1) == y.long()).to(out.dtype)
        hit = (out.argmax(-1) == y.argmax(-1)).to(out.dtype)
        return torch.where(y.sum(-1) > 0, hit, torch.full_like(hit, float("nan")))  # unlabelled: no label to hit

    def check_targets(self, y, where):
        super().check_targets(y, where)
        sums = y.sum(-1)
        if (y < 0).any() or not bool(((sums - 1).abs() < 1e-6).logical_or(sums == 0).all()):
            raise ConfigError(f"{where}: soft_labels targets must be rows on the simplex (labelled) or zeros "
                              "(unlabelled)")

    def check_outputs(self, out, y, where):
        if out.shape[-1] != y.shape[-1]:
            raise ConfigError(f"{where}: {y.shape[-1]} classes in the targets but the model has {out.shape[-1]} "
                              "outputs")


SOFT_LABELS = register_loss(SoftLabels.name, SoftLabels())


def semi_supervised_task(dataset: str = "mnist", num_clients: int = 100, alpha: float = 0.1,
                         labelled_fraction: float = 0.05, seed: int = 0, *, hidden: tuple[int, ...] = (128, 64),
                         device: str = "cpu") -> Task:
    """A dataset split over clients by the seeded Dirichlet(``alpha``) label partitioner, with ``labelled_fraction``
    of each client's rows labelled (at least one, drawn with the seed) and the rest unlabelled; the test set keeps
    its labels. The task's ``labels`` are the true labels of every training row (to score the pseudo-labels)."""
    check_number("labelled_fraction", labelled_fraction, low=0.0, high=1.0, low_open=True)
    check_number("alpha", alpha, low=0.0, low_open=True)
    train, test, parts = _split(dataset, num_clients, "dirichlet", seed, {"alpha": alpha})
    if train.num_classes < 2:
        raise ConfigError(f"semi-supervised classification needs labelled classes; {dataset!r} has none")
    y = train.y.numpy()
    if not np.array_equal(y, np.round(y)) or y.min() < 0 or y.max() >= train.num_classes:
        raise ConfigError(f"semi-supervised classification needs class labels 0..{train.num_classes - 1}; "
                          f"{dataset!r} has other values")
    y = y.astype(np.int64)  # QSAR stores its 0/1 classes as floats
    rng = np.random.default_rng([seed, 5])
    eye = np.eye(train.num_classes, dtype=np.float32)
    clients = []
    for p in parts:
        weights = np.zeros((len(p), train.num_classes), dtype=np.float32)
        k = max(1, int(round(labelled_fraction * len(p))))
        chosen = rng.choice(len(p), size=min(k, len(p)), replace=False)
        weights[chosen] = eye[y[p[chosen]]]
        clients.append((train.x[p], weights))
    net = mlp_model(int(np.prod(train.x.shape[1:])), train.num_classes, hidden=tuple(hidden))
    label = f"{dataset}-semi-supervised/dirichlet(alpha={alpha})/{num_clients}/labelled={labelled_fraction:g}"
    task = from_client_arrays(label, clients, net, SOFT_LABELS, test=ArrayDataset(test.x, test.y, test.num_classes))
    labels = torch.cat([torch.as_tensor(y[p]) for p in parts])
    return dataclasses.replace(task, partition=parts, labels=labels).to(device)


TASKS.register("semi_supervised", semi_supervised_task)
