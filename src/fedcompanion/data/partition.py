"""Seeded partitioners: who holds which sample.

Each partitioner takes the labels (or just the sample count), the number of clients and a
``numpy.random.Generator`` (never global state) and returns one sorted ``int64`` index array per
client. Together the arrays cover every sample exactly once.
"""
from __future__ import annotations

import numpy as np

from ..validation import ConfigError, check_choice, check_number


def iid_partition(num_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle, then split into ``num_clients`` parts whose sizes differ by at most one."""
    _check_clients(num_clients, num_samples)
    return [np.sort(part) for part in np.array_split(rng.permutation(num_samples), num_clients)]


def dirichlet_partition(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
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


def shard_partition(
    labels: np.ndarray, num_clients: int, shards_per_client: int, rng: np.random.Generator
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


def quantity_skew_partition(
    num_samples: int, num_clients: int, beta: float, rng: np.random.Generator, min_size: int = 2
) -> list[np.ndarray]:
    """Quantity skew: IID samples, client sizes proportional to q ~ Dir(beta 1), each >= ``min_size``.

    ``min_size`` samples go to every client first; the rest are split by the Dirichlet shares.
    """
    check_number("beta", beta, low=0.0, low_open=True)
    _check_clients(num_clients * min_size, num_samples)
    spare = num_samples - num_clients * min_size
    q = rng.dirichlet(np.full(num_clients, float(beta)))
    sizes = min_size + np.floor(q * spare).astype(int)
    sizes[: num_samples - sizes.sum()] += 1  # hand out the rounding remainder
    cuts = np.cumsum(sizes)[:-1]
    return [np.sort(p).astype(np.int64) for p in np.split(rng.permutation(num_samples), cuts)]


PARTITIONS = {"iid": (), "dirichlet": ("alpha", "min_size"), "shards": ("shards_per_client",), "quantity": ("beta",)}


def partition(
    labels: np.ndarray, num_clients: int, scheme: str, rng: np.random.Generator, **kwargs
) -> list[np.ndarray]:
    """Dispatch by name: ``iid``, ``dirichlet`` (alpha, min_size), ``shards`` (shards_per_client),
    ``quantity`` (beta)."""
    check_choice("partition", scheme, PARTITIONS)
    unknown = sorted(set(kwargs) - set(PARTITIONS[scheme]))
    if unknown:
        raise ConfigError(f"the {scheme!r} partition has no parameter {unknown}; "
                          f"its parameters are {list(PARTITIONS[scheme])}")
    n = len(labels)
    if scheme == "iid":
        return iid_partition(n, num_clients, rng)
    if scheme == "dirichlet":
        return dirichlet_partition(labels, num_clients, kwargs.get("alpha", 0.5), rng, kwargs.get("min_size", 2))
    if scheme == "shards":
        return shard_partition(labels, num_clients, kwargs.get("shards_per_client", 2), rng)
    return quantity_skew_partition(n, num_clients, kwargs.get("beta", 1.0), rng)


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
