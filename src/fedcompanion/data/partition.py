"""Seeded partitioners: who holds which sample.

Every partitioner has one signature, ``partitioner(labels, num_clients, rng, **parameters)``: the labels (some
use only their count), the number of clients, a ``numpy.random.Generator`` (never global state) and its own
keyword-only parameters with their defaults. It returns one sorted ``int64`` index array per client; together the
arrays cover every sample exactly once. ``PARTITIONS`` names them (``register_partition`` adds one); every
keyword-only parameter of a registered partitioner can be set from a config's ``task_args``.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from ..registry import Registry
from ..validation import ConfigError, check_number


def _check_partitioner(name: str, partitioner: Callable) -> Callable:
    if not callable(partitioner):
        raise ConfigError(f"partitioner {name!r} must be callable, got {partitioner!r}")
    parameters = inspect.signature(partitioner).parameters
    if [p.kind for p in list(parameters.values())[:3]] != [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 3:
        raise ConfigError(f"partitioner {name!r} must take (labels, num_clients, rng, *, ...parameters)")
    return partitioner


PARTITIONS = Registry("partition", _check_partitioner)


def register_partition(name: str, partitioner: Callable | None = None):
    """Register ``partitioner(labels, num_clients, rng, *, ...) -> list of index arrays`` as ``name`` (a
    decorator without ``partitioner``); its keyword-only parameters become the partition's parameters."""
    return PARTITIONS.register(name, partitioner)


def partition_parameters(scheme: str) -> dict:
    """The parameters of partition ``scheme`` and their defaults (its partitioner's keyword-only arguments)."""
    parameters = inspect.signature(PARTITIONS.lookup(scheme)).parameters.values()
    return {p.name: p.default for p in parameters if p.kind == inspect.Parameter.KEYWORD_ONLY}


@register_partition("iid")
def iid_partition(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle, then split into ``num_clients`` parts whose sizes differ by at most one."""
    num_samples = len(labels)
    _check_clients(num_clients, num_samples)
    return [np.sort(part) for part in np.array_split(rng.permutation(num_samples), num_clients)]


@register_partition("dirichlet")
def dirichlet_partition(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    alpha: float = 0.5,
    min_size: int = 2,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Label skew (Hsu et al., 2019): class ``c``'s samples go to clients in proportions q_c ~ Dir(alpha 1).

    Small ``alpha`` gives each client few classes; ``alpha -> inf`` approaches an IID split.
    Departure from some implementations, stated: the whole draw is repeated (up to ``max_tries``
    times) until every client holds at least ``min_size`` samples, so no client is empty.
    """
    check_number("alpha", alpha, low=0.0, low_open=True)
    check_number("min_size", min_size, low=1, integer=True)
    check_number("max_tries", max_tries, low=1, integer=True)
    labels = np.asarray(labels)
    _check_clients(num_clients, len(labels) // max(min_size, 1))
    by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = rng.permutation(idx)
            q = rng.dirichlet(np.full(num_clients, float(alpha)))
            cuts = (np.cumsum(q)[:-1] * len(idx)).astype(int)
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].append(chunk)
        result = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
        if min(len(p) for p in result) >= min_size:
            return result
    raise ConfigError(
        f"dirichlet alpha={alpha} left some of {num_clients} clients with fewer than "
        f"{min_size} samples in {max_tries} draws; use a larger alpha or fewer clients"
    )


@register_partition("shards")
def shard_partition(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, *, shards_per_client: int = 2
) -> list[np.ndarray]:
    """Pathological split (McMahan et al., 2017): sort by label, cut into ``num_clients * k`` shards
    of equal size, and deal ``k`` random shards to each client (so each sees about ``k`` classes)."""
    check_number("shards_per_client", shards_per_client, low=1, integer=True)
    labels = np.asarray(labels)
    _check_clients(num_clients * shards_per_client, len(labels))
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, num_clients * shards_per_client)
    dealt = rng.permutation(len(shards)).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([shards[s] for s in row])).astype(np.int64) for row in dealt]


@register_partition("quantity")
def quantity_skew_partition(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, *, beta: float = 1.0, min_size: int = 2
) -> list[np.ndarray]:
    """Quantity skew: IID samples, client sizes proportional to q ~ Dir(beta 1), each >= ``min_size``.

    ``min_size`` samples go to every client first; the rest are split by the Dirichlet shares.
    """
    check_number("beta", beta, low=0.0, low_open=True)
    check_number("min_size", min_size, low=1, integer=True)
    num_samples = len(labels)
    _check_clients(num_clients * min_size, num_samples)
    spare = num_samples - num_clients * min_size
    q = rng.dirichlet(np.full(num_clients, float(beta)))
    sizes = min_size + np.floor(q * spare).astype(int)
    sizes[: num_samples - sizes.sum()] += 1  # hand out the rounding remainder
    cuts = np.cumsum(sizes)[:-1]
    return [np.sort(p).astype(np.int64) for p in np.split(rng.permutation(num_samples), cuts)]


def partition(
    labels: np.ndarray, num_clients: int, scheme: str, rng: np.random.Generator, **parameters
) -> list[np.ndarray]:
    """Split by the registered partitioner ``scheme`` (``iid``; ``dirichlet``: alpha, min_size, max_tries;
    ``shards``: shards_per_client; ``quantity``: beta, min_size) with its keyword ``parameters``."""
    known = partition_parameters(scheme)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(f"the {scheme!r} partition has no parameter {unknown}; its parameters are {list(known)}")
    return PARTITIONS[scheme](np.asarray(labels), num_clients, rng, **parameters)


def label_counts(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Matrix [num_clients, num_classes] of how many samples of each class each client holds."""
    labels = np.asarray(labels).astype(int)
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def _check_clients(num_clients, capacity: int) -> None:
    check_number("num_clients", num_clients, low=1, integer=True)
    if num_clients > capacity:
        raise ConfigError(
            f"num_clients={num_clients} is too many for {capacity} units of data; use fewer clients"
        )
