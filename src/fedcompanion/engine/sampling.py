r"""Client sampling: which clients are active in round r, and with what probability.

A sampler returns the sorted active set :math:`\mathcal{A}^r` and the inclusion probabilities
:math:`p_i^r = \Pr(i \in \mathcal{A}^r)` of *every* client, which unbiased aggregation
(:math:`d_i^r = 1/p_i^r`) needs. The random stream is the run's own (seeded) generator and does
not depend on the algorithm, so every algorithm sees the same clients in the same rounds.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..registry import Registry
from ..validation import ConfigError, check_number


class Sampler:
    """Base class: ``sample(r, rng) -> (active client ids, inclusion probabilities [N])``."""

    def __init__(self, num_clients: int):
        self.num_clients = check_number("num_clients", num_clients, low=1, integer=True)

    def sample(self, r: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Round r's active clients (sorted indices) and every client's inclusion probability p_i^r, [N]."""
        raise NotImplementedError


class FullParticipation(Sampler):
    """Every client, every round (p_i^r = 1)."""

    def sample(self, r, rng):
        n = self.num_clients
        return np.arange(n), np.ones(n)


class UniformSampler(Sampler):
    """m clients uniformly without replacement (p_i^r = m / N)."""

    def __init__(self, num_clients: int, clients_per_round: int):
        super().__init__(num_clients)
        self.m = _check_m(clients_per_round, num_clients)

    def sample(self, r, rng):
        n = self.num_clients
        return np.sort(rng.choice(n, self.m, replace=False)), np.full(n, self.m / n)


class PoissonSampler(Sampler):
    """Each client independently with probability p_i^r (arbitrary, possibly round-dependent).

    ``probabilities(r)`` returns the vector [N]; the number of active clients is random with mean
    sum_i p_i^r and may be zero (the round then changes nothing for aggregating algorithms).
    """

    def __init__(self, num_clients: int, probabilities: Callable[[int], np.ndarray]):
        super().__init__(num_clients)
        self.probabilities = probabilities

    def sample(self, r, rng):
        p = np.asarray(self.probabilities(r), dtype=float)
        if p.shape != (self.num_clients,) or not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
            raise ConfigError(
                f"sampling probabilities for round {r} must be {self.num_clients} values in [0, 1]"
            )
        return np.flatnonzero(rng.random(self.num_clients) < p), p


def weighted_probabilities(weights: np.ndarray, clients_per_round: int) -> np.ndarray:
    """p_i = min(1, m q_i) for q = weights / sum(weights), re-spread so that sum p_i = m."""
    q = np.asarray(weights, dtype=float)
    q = q / q.sum()
    m = float(clients_per_round)
    p = np.minimum(1.0, m * q)
    for _ in range(len(q)):  # clip-and-redistribute until the capped mass adds up to m
        free = p < 1.0
        missing = m - p.sum()
        if missing <= 1e-12 or not free.any():
            break
        p[free] = np.minimum(1.0, p[free] + missing * q[free] / q[free].sum())
    return p


def _check_sampling(name: str, factory) -> Callable:
    if not callable(factory):
        raise ConfigError(f"sampling {name!r}: register a factory (num_clients, clients_per_round, weights) -> "
                          f"Sampler, got {factory!r}")
    return factory


SAMPLINGS = Registry("sampling", _check_sampling)  # name -> (num_clients, clients_per_round, weights) -> Sampler


def register_sampling(name: str, factory: Callable | None = None):
    """Make ``sampling=name`` (``fc.run``, a config) draw its clients from ``factory(num_clients, clients_per_round,
    weights) -> Sampler`` (``weights``: the client weights, [N]; a decorator without ``factory``). Its code enters
    the key of every run that names it."""
    return SAMPLINGS.register(name, factory)


@register_sampling("full")
def full_participation(num_clients: int, clients_per_round: int | None, weights: np.ndarray) -> Sampler:
    """Every client in every round."""
    return FullParticipation(num_clients)


@register_sampling("uniform")
def uniform_sampling(num_clients: int, clients_per_round: int | None, weights: np.ndarray) -> Sampler:
    """m clients drawn without replacement, each with probability m / N."""
    return UniformSampler(num_clients, _check_m(clients_per_round, num_clients))


@register_sampling("weighted")
def weighted_sampling(num_clients: int, clients_per_round: int | None, weights: np.ndarray) -> Sampler:
    """Poisson sampling with p_i proportional to the client weights (capped at 1), m expected clients."""
    p = weighted_probabilities(weights, _check_m(clients_per_round, num_clients))
    return PoissonSampler(num_clients, lambda r: p)


def make_sampler(
    sampling: str | Callable[[int], np.ndarray],
    num_clients: int,
    clients_per_round: int | None = None,
    weights: np.ndarray | None = None,
) -> Sampler:
    """A registered sampling by name (``'full'``, ``'uniform'``: m without replacement, ``'weighted'``: Poisson
    with p_i proportional to the client weights, expected m clients, or a user's), or a callable ``r -> p^r``
    (Poisson). Without ``clients_per_round``, full participation."""
    if callable(sampling):
        return PoissonSampler(num_clients, sampling)
    factory = SAMPLINGS.lookup(sampling)
    if clients_per_round is None:
        return FullParticipation(num_clients)
    sampler = factory(num_clients, clients_per_round, np.ones(num_clients) if weights is None else weights)
    if not isinstance(sampler, Sampler):
        raise ConfigError(f"sampling {sampling!r} returned {type(sampler).__name__}, not a Sampler")
    return sampler


def _check_m(m, n) -> int:
    return check_number("clients_per_round", m, low=1, high=n, integer=True)
