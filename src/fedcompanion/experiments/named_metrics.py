"""Extra metrics by name (``ExperimentConfig(metrics=[...])``): each a builder ``(task, config) -> (x -> float)``.

``register_metric(name, builder)`` adds one; a run's cache key covers the code of the metrics it records.
"""
from __future__ import annotations

import torch

from ..registry import Registry
from ..validation import ConfigError


def _check_metric(name: str, builder):
    if not callable(builder):
        raise ConfigError(f"register_metric({name!r}, builder): the builder must be callable as builder(task, config)")
    return builder


METRICS = Registry("metric", _check_metric)


def register_metric(name: str, builder=None):
    """Make ``metrics=[name]`` record ``builder(task, config)(x)`` at every evaluation (a decorator without
    ``builder``)."""
    return METRICS.register(name, builder)


def suboptimality(task, config):
    """F(x) - F(x*) on a convex task."""
    f_star = task.optimum[1]
    return lambda x: task.global_loss(x) - f_star


def distance_to_optimum(task, config):
    """||x - x*|| / ||x*|| on a convex task."""
    x_star = task.optimum[0]
    return lambda x: float((x - x_star).norm() / x_star.norm())


def clustering_objective(task, config):
    """The two-block clustering objective at the assignments that minimise it (see ``two_block``)."""
    from ..algorithms.simplex import clustering_objective as objective

    tau = config.hyperparameters.get("tau", 1.0)
    return lambda x: objective(task, x, tau)


def clustering_accuracy(task, config):
    """Test accuracy when each centroid takes the majority label of the training points nearest to it."""
    if task.labels is None or task.test is None:
        raise ConfigError("clustering_accuracy needs a clustering task (with labels and test data)")
    num_clusters = task.model.mu.shape[0]

    def accuracy(x):
        mu = x.view(num_clusters, -1)
        nearest = torch.cdist(task.x_all, mu).argmin(1)
        label_of = torch.tensor([int(torch.mode(task.labels[nearest == c]).values) if (nearest == c).any() else -1
                                 for c in range(num_clusters)])
        return float((label_of[torch.cdist(task.test.x, mu).argmin(1)] == task.test.y).double().mean())
    return accuracy


for _builder in (suboptimality, distance_to_optimum, clustering_objective, clustering_accuracy):
    register_metric(_builder.__name__, _builder)
