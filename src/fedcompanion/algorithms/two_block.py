r"""Two-block problems (the FedVRA paper's extension "FedVRA-U"): a reconstruction.

The paper extends FedVRA to semi-/unsupervised problems with two blocks of variables and
constraints, but its equations are not in our extract. This module is our reconstruction, on
the simplest faithful instance we could find: **federated clustering with simplex-constrained
assignments**. The shared block is the centroid matrix :math:`x = (\mu_1, \dots, \mu_C)`; the
private block of client i is its assignment matrix :math:`Z_i` (one row per sample, each row on
the probability simplex :math:`\Delta_C`):

.. math::
    \min_{x,\ Z_i \in \Delta_C^{n_i}} \sum_i w_i f_i(x, Z_i), \qquad
    f_i(x, Z_i) = \frac{1}{n_i}\sum_{j\in D_i}\Big(\sum_c z_{jc}\|a_j - \mu_c\|^2 + \frac{\tau}{2}\|z_j\|^2\Big).

Each active client first minimises its private block exactly at the broadcast model. With
:math:`d_{jc} = \|a_j - \mu_c\|^2` the row problem
:math:`\min_{z\in\Delta}\langle d_j, z\rangle + \frac{\tau}{2}\|z\|^2`
is solved by a Euclidean projection, :math:`z_j = \Pi_{\Delta}(-d_j/\tau)` (a "sparsemax" of the
negative distances; :math:`\tau \to 0` gives hard k-means). Then it runs the shared-block
algorithm unchanged on :math:`f_i(\cdot, Z_i)`: FedVRA (local SGD on the augmented Lagrangian, dual
step, server Steps 19-20) or, as the baseline, FedAvg. :class:`TwoBlock` wraps any registered
algorithm this way. The assignments are the client's own state (``state.clients['assignments']``, never
uploaded) and reach the engines as the local objective's targets, so the engines train on them like labels;
the task is never changed.

The same step serves the **semi-supervised** form (:mod:`fedcompanion.tasks.semi_supervised`): there the private
block is the pseudo-label matrix of a client's unlabelled rows, the costs are the per-class losses
:math:`\ell_{jc} = -\log\mathrm{softmax}_c(\mathrm{out}_j)` (the loss's ``costs``) instead of the distances, and a
labelled row (a stored one-hot target) keeps its label: :func:`private_block`.
"""
from __future__ import annotations

import torch

from ..protocol import State
from ..validation import ConfigError, check_number
from .base import Algorithm, make, register
from .simplex import assignments


def private_block(task, x: torch.Tensor, client: int, tau: float, mass: float = 1.0) -> torch.Tensor:
    """Client ``client``'s exact private-block step at the model ``x``: each row's minimiser of
    <c_j, z> + tau/2 ||z||^2 over the simplex scaled by ``mass`` (rows summing to ``mass``), z_j = mass *
    :func:`assignments` (c_j, tau * mass), with c_j its costs (clustering: the model's outputs, the squared
    distances; semi-supervised: the loss's per-class ``costs``); the rows whose stored target is a label (a row
    summing to 1) keep it."""
    inputs, stored = task.client_data(client)
    out = task.forward(x, inputs)
    z = mass * assignments(task.loss.costs(out), tau * mass)
    return torch.where(stored.sum(-1, keepdim=True) > 0, stored, z)


@register
class TwoBlock(Algorithm):
    """Exact private-block (assignment) step, then ``inner`` on the shared block.

    Hyperparameters: ``tau`` (the assignment regulariser, > 0), ``inner`` (a registered algorithm
    name, e.g. ``'fedvra'`` or ``'fedavg'``), ``inner_hyperparameters`` and ``mass`` (the total weight of a row
    of the private block, in (0, 1]: 1 for clustering's assignments; below 1, an unlabelled row's pseudo-labels
    weigh less than a label) and ``start_round`` (the first round with a private step; before it the clients train
    on their stored targets: a warm-up on the labelled rows alone). Client state: the inner
    algorithm's, plus each client's assignments [n_i, C]. Communication is the inner algorithm's."""

    name = "two_block"

    def __init__(self, tau: float = 1.0, inner: str = "fedvra", inner_hyperparameters: dict | None = None,
                 mass: float = 1.0, start_round: int = 0):
        self.tau = check_number("tau", tau, low=0.0, low_open=True)
        self.mass = check_number("mass", mass, low=0.0, high=1.0, low_open=True)
        self.start_round = check_number("start_round", start_round, low=0, integer=True)
        if inner == self.name:
            raise ConfigError("two_block's inner algorithm cannot be two_block")
        self.inner = inner
        self.inner_hyperparameters = dict(inner_hyperparameters or {})
        self._inner = make(inner, **self.inner_hyperparameters)  # a hyperparameter object, never run state
        if self._inner.solves_exactly:  # its exact solves use the task's stored targets, not the assignments
            raise ConfigError(f"two_block's inner algorithm must run on the SGD engine, got {inner!r}")
        if self._inner.needs_probe:  # the probe and the initial losses would score the task's zero targets
            raise ConfigError(f"two_block's inner algorithm cannot be {inner!r}: it needs the losses at the global "
                              "model (a probe), which would score the stored zero targets instead of the assignments")

    def init(self, task, x0):
        if not task.loss.private_block:
            raise ConfigError(f"two_block needs a clustering or semi-supervised task, whose loss's targets are its "
                              f"private block ('cluster', 'soft_labels'), got {task.loss.name!r}")
        inner = self._inner.init(task, x0)
        stored = tuple(task.client_data(i)[1].clone() for i in range(task.num_clients))  # labels, or zeros
        return State(inner.server, {**inner.clients, "assignments": stored})

    def broadcast(self, state):
        return self._inner.broadcast(state)

    def local_objective(self, task, received, clients, info):
        with torch.no_grad():  # private block: exact minimisation at the broadcast model (from start_round on;
            # before it, the stored targets: no weight on the unlabelled rows of a semi-supervised task)
            z = tuple(private_block(task, received["x"], i, self.tau, self.mass) if info.round >= self.start_round
                      else task.client_data(i)[1] for i in info.clients.tolist())
        return self._inner.local_objective(task, received, clients, info).replace(targets=z)

    def client_update(self, task, received, clients, info, result):
        new, uploads = self._inner.client_update(task, received, clients, info, result)
        return {**new, "assignments": result.objective.targets}, uploads

    def server_update(self, server, info, uploads):
        return self._inner.server_update(server, info, uploads)
