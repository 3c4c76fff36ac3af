"""The tasks the package builds by name (``ExperimentConfig(task=...)``): a centralised dataset split over clients,
the CEADMM paper's heterogeneous least squares, Li et al.'s Synthetic(alpha, beta), QSAR logistic regression and
federated clustering; :data:`TASKS` names them and :func:`register_task` adds a user's own."""
from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..data.files import reads
from ..data.loaders import ArrayDataset, load_dataset, load_qsar
from ..data.partition import partition
from ..data.synthetic import heterogeneous_least_squares, synthetic_li
from ..models import Centroids, least_squares_model, logistic_model, make_model
from ..registry import Registry
from ..validation import ConfigError, check_choice, check_number
from .core import Task, from_client_arrays


def _local_split(parts: list[np.ndarray], fraction: float, rng: np.random.Generator):
    """Each client's indices cut into (train, held-out) with ``fraction`` held out (at least one row each)."""
    train, held = [], []
    for p in parts:
        p = rng.permutation(p)
        k = min(len(p) - 1, max(1, int(round(fraction * len(p)))))
        held.append(np.sort(p[:k]))
        train.append(np.sort(p[k:]))
    return train, held


def federated_dataset_task(
    dataset: str = "mnist",
    num_clients: int = 100,
    partition_scheme: str = "iid",
    model: str = "mlp",
    seed: int = 0,
    *,
    l2: float = 0.0,
    weights: str = "size",
    hidden: tuple[int, ...] = (200, 200),
    local_test_fraction: float = 0.0,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    loss: str | None = None,
    **partition_kwargs,
) -> Task:
    """A centralised dataset split over ``num_clients`` clients by a seeded partitioner.

    ``partition_kwargs``: ``alpha`` (dirichlet), ``shards_per_client`` (shards), ``beta`` (quantity).
    ``loss``: a registered loss by name (default: logistic for two classes, else cross-entropy).
    ``local_test_fraction`` > 0 holds out that share of each client's data as its own test split (the
    AdaFedAdam authors use 0.2), for per-client metrics.
    """
    check_number("local_test_fraction", local_test_fraction, low=0.0, high=0.9)
    train, test, parts = _split(dataset, num_clients, partition_scheme, seed, partition_kwargs)
    if loss is None:
        loss = "logistic" if train.num_classes == 2 else "cross_entropy"
    in_features = math.prod(train.x.shape[1:])
    net = make_model(model, in_features, train.num_classes, hidden=hidden)
    held = None
    if local_test_fraction > 0:
        parts, held_parts = _local_split(parts, local_test_fraction, np.random.default_rng([seed, 4]))
        held = [(train.x[p], train.y[p]) for p in held_parts]
    clients = [(train.x[p], train.y[p]) for p in parts]
    extra = f",local_test={local_test_fraction}" if local_test_fraction else ""
    label = f"{dataset}/{partition_scheme}{_kw(partition_kwargs)}/{num_clients}/{model}{extra}"
    task = from_client_arrays(label, clients, net, loss, weights=weights, l2=l2, test=test, client_test=held,
                              dtype=dtype)
    return dataclasses.replace(task, partition=parts).to(device)  # the partition: for plots of the label mix


def least_squares_task(num_clients: int = 32, dim: int = 100, seed: int = 0, *, noise: float = 0.1,
                       nonconvex: float = 0.0, dtype: torch.dtype = torch.float64, device: str = "cpu") -> Task:
    """The CEADMM paper's heterogeneous linear regression: f_i = (1 / 2 d_i)||A_i x - b_i||^2,
    w_i = 1 / m (the paper's f_i = 1/2||A_i x - b_i||^2 with w_i = 1/(m d_i): the same F); ``nonconvex`` > 0 adds
    the non-convex regulariser with that weight to every f_i (see :class:`~fedcompanion.tasks.Task`)."""
    check_number("noise", noise, low=0.0)
    check_number("nonconvex", nonconvex, low=0.0)
    clients = heterogeneous_least_squares(num_clients, dim, np.random.default_rng([seed, 0]), noise=noise)
    net = least_squares_model(dim)
    return from_client_arrays(f"least_squares/{num_clients}x{dim}{_nonconvex(nonconvex)}", clients, net, "squared",
                              weights="uniform", dtype=dtype, nonconvex=nonconvex).to(device)


def synthetic_task(alpha: float = 1.0, beta: float = 1.0, num_clients: int = 30, seed: int = 0,
                   model: str = "logistic", device: str = "cpu") -> Task:
    """Synthetic(alpha, beta) of Li et al. with multinomial logistic regression (or an MLP)."""
    clients = synthetic_li(num_clients, alpha, beta, np.random.default_rng([seed, 0]))
    net = make_model(model, clients[0][0].shape[1], 10)
    return from_client_arrays(f"synthetic({alpha},{beta})/{num_clients}", clients, net, "cross_entropy").to(device)


QSAR_SETTINGS = ("ours", "authors")


@reads(*load_qsar.data_files)
def qsar_logistic_task(num_clients: int = 64, mu: float = 1e-3, seed: int = 0, setting: str = "ours",
                       nonconvex: float = 0.0, dtype: torch.dtype = torch.float64, device: str = "cpu") -> Task:
    r"""l2-logistic regression on QSAR oral toxicity, rows split into contiguous client blocks (CEADMM paper, Sec. 5).

    ``setting='ours'``: 20% of the rows held out for accuracy, a bias term, size weights and
    f_i = mean logistic loss + mu/2 ||x||^2. ``setting='authors'``: the authors' code (ICEADMM4LogistReg.m):
    every row used for training, no bias, the first m-1 clients round(d/m) rows each and the last the rest,
    w_i = 1/m and f_i = mean logistic loss + mu/(2 d_i) ||x||^2 (their w_i = 1/(m d_i) on summed losses with
    mu/2 ||x||^2 per client: the same F). ``nonconvex`` > 0 adds the non-convex regulariser
    nonconvex * sum_k x_k^2 / (1 + x_k^2) to every f_i (see :class:`~fedcompanion.tasks.Task`).
    """
    check_choice("setting", setting, QSAR_SETTINGS)
    check_number("mu", mu, low=0.0)
    check_number("nonconvex", nonconvex, low=0.0)
    if setting == "ours":
        train, test = load_qsar(seed=seed)
        parts = np.array_split(np.arange(len(train)), num_clients)
        net = logistic_model(train.x.shape[1], 2)
        clients = [(train.x[p], train.y[p]) for p in parts]
        return from_client_arrays(f"qsar/{num_clients}{_nonconvex(nonconvex)}", clients, net, "logistic",
                                  weights="size", l2=mu, test=test, dtype=dtype, nonconvex=nonconvex).to(device)
    train, _ = load_qsar(test_fraction=0.0, seed=seed)
    d = len(train)
    check_number("num_clients", num_clients, low=1, high=d // 2, integer=True)
    sizes = [round(d / num_clients)] * (num_clients - 1)
    sizes.append(d - sum(sizes))
    if sizes[-1] <= 0:
        raise ConfigError(f"num_clients={num_clients} leaves the last client no rows in the authors' split")
    cuts = np.cumsum(sizes)[:-1]
    clients = [(train.x[p], train.y[p]) for p in np.split(np.arange(d), cuts)]
    net = nn.Sequential(nn.Flatten(), nn.Linear(train.x.shape[1], 1, bias=False))
    l2 = mu / torch.tensor(sizes, dtype=torch.float64)
    return from_client_arrays(f"qsar-authors/{num_clients}{_nonconvex(nonconvex)}", clients, net, "logistic",
                              weights="uniform", l2=l2, dtype=dtype, nonconvex=nonconvex).to(device)


def _nonconvex(weight: float) -> str:
    """The task name's suffix for a non-convex regulariser (none without one)."""
    return f"/nonconvex={weight:g}" if weight else ""


def _split(dataset: str, num_clients: int, scheme: str, seed: int, partition_kwargs: dict):
    """(train, test, per-client index arrays): the dataset split by the seeded partitioner."""
    train, test = load_dataset(dataset)
    rng = np.random.default_rng([seed, 0])
    return train, test, partition(train.y.numpy(), num_clients, scheme, rng, **partition_kwargs)


def _kw(kwargs: dict) -> str:
    return "(" + ",".join(f"{k}={v}" for k, v in sorted(kwargs.items())) + ")" if kwargs else ""


def clustering_task(dataset: str = "mnist", num_clients: int = 100, partition_scheme: str = "dirichlet",
                    num_clusters: int = 10, seed: int = 0, device: str = "cpu", **partition_kwargs) -> Task:
    """Federated clustering of a dataset's inputs (labels only decide the non-IID split): the shared
    block is ``num_clusters`` centroids, each client's private block its assignments (see
    :mod:`fedcompanion.algorithms.two_block`). The initial centroids are ``num_clusters`` training points
    drawn with the run's seed; the stored targets are zeros (the algorithm keeps the assignments)."""
    check_number("num_clusters", num_clusters, low=1, integer=True)
    train, test, parts = _split(dataset, num_clients, partition_scheme, seed, partition_kwargs)
    x = train.x.flatten(1)
    clients = [(x[p], np.zeros((len(p), num_clusters), dtype=np.float32)) for p in parts]
    net = Centroids(num_clusters, x.shape[1])
    label = f"{dataset}-clustering/{partition_scheme}{_kw(partition_kwargs)}/{num_clients}/C={num_clusters}"
    task = from_client_arrays(label, clients, net, "cluster", weights="size")
    points = task.x_all

    def random_points(run_seed: int) -> torch.Tensor:
        pick = torch.randperm(len(points), generator=torch.Generator().manual_seed(run_seed))[:num_clusters]
        return points[pick.to(points.device)].flatten()

    return dataclasses.replace(  # the test set is labelled: for clustering accuracy
        task, partition=parts, labels=torch.cat([train.y[p] for p in parts]), initializer=random_points,
        test=ArrayDataset(test.x.flatten(1), test.y, test.num_classes)).to(device)


def _check_task(name: str, builder: Callable[..., Task]) -> Callable[..., Task]:
    if not callable(builder) or "seed" not in inspect.signature(builder).parameters:
        raise ConfigError(f"register_task({name!r}, builder): the builder must be callable as builder(seed=...)")
    return builder


TASKS = Registry("task", _check_task)


def is_partitioned(builder: Callable[..., Task]) -> bool:
    """Whether a task builder splits a dataset with a registered partitioner (it takes ``partition_scheme``, and the
    partitioner's keywords with it): a user's builder that does is keyed and checked like the built-in ones."""
    return "partition_scheme" in inspect.signature(builder).parameters


def register_task(name: str, builder: Callable[..., Task] | None = None):
    """Make ``ExperimentConfig(task=name)`` build ``builder(seed=..., **task_args) -> Task`` (a decorator without
    ``builder``). The cache keys a user's task on the built task's content (:func:`task_digest`), so a changed task
    is recomputed, never served stale."""
    return TASKS.register(name, builder)


for _name, _builder in (("dataset", federated_dataset_task), ("least_squares", least_squares_task),
                        ("synthetic", synthetic_task), ("qsar", qsar_logistic_task), ("clustering", clustering_task)):
    register_task(_name, _builder)
