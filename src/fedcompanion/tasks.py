r"""A task: model + loss + per-client data + evaluation.

The federated objective is

.. math::  F(x) = \sum_{i=1}^N w_i f_i(x),\qquad
           f_i(x) = \frac{1}{n_i}\sum_{j \in D_i} \ell(x; \xi_j) + \frac{\mu}{2}\|x\|^2,

with client weights :math:`w_i` summing to one (by default :math:`w_i = n_i / n`, so that F is
the mean loss over all samples). Parameters are one flat vector ``x`` of shape ``[P]``; the
model is called with ``torch.func.functional_call``. Client data are stored back to back
(``x_all[offsets[i]:offsets[i+1]]``) so that per-client quantities are one pass over the data.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from .data.loaders import ArrayDataset, load_dataset
from .data.partition import partition
from .data.synthetic import heterogeneous_least_squares, synthetic_li
from .models import Centroids, make_model
from .validation import check_choice, check_number

LOSSES = ("cross_entropy", "logistic", "squared", "cluster")


def per_sample_loss(kind: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Loss of each sample: softmax cross-entropy, binary logistic (y in {0,1}), 0.5 * residual^2, or
    for clustering sum_c z_c d_c (``out``: squared distances to the centroids, ``y``: assignments z)."""
    if kind == "cluster":
        return (y * out).sum(-1)
    if kind == "cross_entropy":
        return F.cross_entropy(out, y, reduction="none")
    if kind == "logistic":
        return F.binary_cross_entropy_with_logits(out.squeeze(-1), y, reduction="none")
    return 0.5 * (out.squeeze(-1) - y) ** 2


def per_sample_correct(kind: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """1.0 where the prediction is right (NaN for regression and clustering, which have no labels here)."""
    if kind == "cross_entropy":
        return (out.argmax(-1) == y).to(out.dtype)
    if kind == "logistic":
        return ((out.squeeze(-1) > 0).to(out.dtype) == y).to(out.dtype)
    return torch.full(out.shape[:1], float("nan"), dtype=out.dtype)


@dataclass
class Task:
    r"""Everything an algorithm may know about a federated problem.

    Attributes:
        name: short description used in results.
        model: the module whose parameters are flattened into ``x``.
        loss: one of ``cross_entropy``, ``logistic``, ``squared``.
        x_all, y_all: every client's training data, back to back.
        offsets: client ``i`` holds rows ``offsets[i]:offsets[i+1]``.
        weights: :math:`w_i`, a float64 tensor summing to one.
        l2: :math:`\mu`, the l2 regulariser inside every :math:`f_i`.
        test: held-out data for accuracy (or ``None``).
        partition: for a split dataset, each client's indices into it (for label-mix plots).
    """

    name: str
    model: nn.Module
    loss: str
    x_all: torch.Tensor
    y_all: torch.Tensor
    offsets: torch.Tensor
    weights: torch.Tensor
    l2: float = 0.0
    test: ArrayDataset | None = None
    dtype: torch.dtype = torch.float32
    partition: list | None = field(default=None, repr=False)  # index arrays into the source dataset
    _shapes: list = field(init=False, repr=False)

    def __post_init__(self):
        check_choice("loss", self.loss, LOSSES)
        check_number("l2", self.l2, low=0.0)
        self.model = self.model.to(self.dtype)
        self._shapes = [(n, p.shape, p.numel()) for n, p in self.model.named_parameters()]
        if not torch.isclose(self.weights.sum(), torch.tensor(1.0, dtype=self.weights.dtype)):
            raise ValueError(f"client weights must sum to 1, got {float(self.weights.sum())}")

    # ----------------------------------------------------------------- structure
    @property
    def num_clients(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_params(self) -> int:
        return sum(n for _, _, n in self._shapes)

    @property
    def client_sizes(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]

    def client_data(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.x_all[lo:hi], self.y_all[lo:hi]

    def unflatten(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """View a flat vector [..., P] as the model's named parameters (leading dims kept)."""
        out, start = {}, 0
        lead = x.shape[:-1]
        for name, shape, n in self._shapes:
            out[name] = x[..., start : start + n].reshape(*lead, *shape)
            start += n
        return out

    def init_params(self, seed: int, zeros: bool = False) -> torch.Tensor:
        """The model's default initialisation under ``seed`` (global RNG untouched), flattened."""
        if zeros:
            return torch.zeros(self.num_params, dtype=self.dtype)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for m in self.model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
        return torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]).to(self.dtype)

    # ----------------------------------------------------------------- losses
    def forward(self, x: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, self.unflatten(x), (inputs,))

    def loss_fn(self, x: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mini-batch estimate of f_i: mean per-sample loss + (l2/2)||x||^2."""
        value = per_sample_loss(self.loss, self.forward(x, inputs), targets).mean()
        if self.l2:
            value = value + 0.5 * self.l2 * (x * x).sum()
        return value

    def client_loss(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """f_i(x) on client i's full data."""
        return self.loss_fn(x, *self.client_data(i))

    def client_grad(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """grad f_i(x) on client i's full data."""
        return torch.func.grad(self.loss_fn)(x, *self.client_data(i))

    def global_loss(self, x: torch.Tensor) -> float:
        """F(x) = sum_i w_i f_i(x)."""
        return float(self.per_client(x)[0] @ self.weights.to(self.dtype))

    def client_means(self, per_sample: torch.Tensor) -> torch.Tensor:
        """Each client's mean of a per-sample quantity laid out like ``y_all``: [n] -> [N]."""
        owner = torch.repeat_interleave(torch.arange(self.num_clients), self.client_sizes)
        total = torch.zeros(self.num_clients, dtype=per_sample.dtype).index_add_(0, owner, per_sample)
        return total / self.client_sizes.to(per_sample.dtype)

    @torch.no_grad()
    def per_client(self, x: torch.Tensor, chunk: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
        """(f_i(x), accuracy_i(x)) for every client, in one pass over all training data."""
        losses, correct = [], []
        for start in range(0, len(self.y_all), chunk):
            out = self.forward(x, self.x_all[start : start + chunk])
            y = self.y_all[start : start + chunk]
            losses.append(per_sample_loss(self.loss, out, y))
            correct.append(per_sample_correct(self.loss, out, y))
        reg = 0.5 * self.l2 * float((x * x).sum()) if self.l2 else 0.0
        return self.client_means(torch.cat(losses)) + reg, self.client_means(torch.cat(correct))

    @torch.no_grad()
    def test_metrics(self, x: torch.Tensor) -> dict[str, float]:
        if self.test is None:
            return {}
        out = self.forward(x, self.test.x.to(self.dtype))
        y = self.test.y.to(self.y_all.dtype)
        return {
            "test_loss": float(per_sample_loss(self.loss, out, y).mean()),
            "test_accuracy": float(per_sample_correct(self.loss, out, y).mean()),
        }

    # ----------------------------------------------------------------- convex tasks
    @functools.cached_property
    def optimum(self) -> tuple[torch.Tensor, float]:
        """(x*, F(x*)) for convex tasks: closed form (least squares) or Newton's method (logistic).

        Raises ``NotImplementedError`` for non-convex models.
        """
        return _convex_optimum(self)


def linear_design(task: Task) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of the design matrix with bias column, targets, and per-row weight w_i / n_i."""
    layers = [m for m in task.model.modules() if isinstance(m, nn.Linear)]
    if len(layers) != 1 or layers[0].out_features != 1:
        raise NotImplementedError(f"task {task.name!r} is not convex (optimum needs a linear model)")
    a = task.x_all.reshape(len(task.x_all), -1).double()
    if layers[0].bias is not None:
        a = torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype)], dim=1)
    row_w = torch.repeat_interleave(task.weights.double() / task.client_sizes.double(), task.client_sizes)
    return a, task.y_all.double(), row_w


def _convex_optimum(task: Task, tol: float = 1e-13, max_iter: int = 100) -> tuple[torch.Tensor, float]:
    a, y, row_w = linear_design(task)
    eye = torch.eye(a.shape[1], dtype=a.dtype)
    if task.loss == "squared":
        # F(x) = sum_j c_j (a_j^T x - y_j)^2 / 2 + mu/2 ||x||^2  =>  (A^T C A + mu I) x = A^T C y
        x = torch.linalg.solve(a.T @ (row_w[:, None] * a) + task.l2 * eye, a.T @ (row_w * y))
    elif task.loss == "logistic":
        x = torch.zeros(a.shape[1], dtype=a.dtype)
        for _ in range(max_iter):  # Newton's method; F is strongly convex when l2 > 0
            p = torch.sigmoid(a @ x)
            grad = a.T @ (row_w * (p - y)) + task.l2 * x
            hess = a.T @ ((row_w * p * (1 - p))[:, None] * a) + task.l2 * eye
            x = x - torch.linalg.solve(hess, grad)
            if grad.norm() < tol:
                break
    else:
        raise NotImplementedError(f"no closed-form optimum for loss {task.loss!r}")
    x_star = x.to(task.dtype)
    return x_star, task.global_loss(x_star)


# --------------------------------------------------------------------- builders
def from_client_arrays(
    name: str,
    clients: list[tuple[np.ndarray, np.ndarray]],
    model: nn.Module,
    loss: str,
    *,
    weights: str = "size",
    l2: float = 0.0,
    test: ArrayDataset | None = None,
    dtype: torch.dtype = torch.float32,
) -> Task:
    """Build a task from one (features, labels) pair per client.

    ``weights='size'`` gives w_i = n_i / n; ``'uniform'`` gives w_i = 1 / N.
    """
    check_choice("weights", weights, ("size", "uniform"))
    ydtype = torch.long if loss == "cross_entropy" else dtype
    x_all = torch.cat([torch.as_tensor(x, dtype=dtype) for x, _ in clients])
    y_all = torch.cat([torch.as_tensor(y).to(ydtype) for _, y in clients])
    sizes = torch.tensor([len(y) for _, y in clients])
    if (sizes == 0).any():
        raise ValueError(f"clients {torch.nonzero(sizes == 0).flatten().tolist()} hold no data")
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    w = sizes.double() / sizes.sum() if weights == "size" else torch.ones(len(sizes), dtype=torch.float64) / len(sizes)
    if test is not None:
        test = ArrayDataset(test.x.to(dtype), test.y.to(ydtype), test.num_classes)
    return Task(name, model, loss, x_all, y_all, offsets, w, l2, test, dtype)


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
    dtype: torch.dtype = torch.float32,
    **partition_kwargs,
) -> Task:
    """A centralised dataset split over ``num_clients`` clients by a seeded partitioner.

    ``partition_kwargs``: ``alpha`` (dirichlet), ``shards_per_client`` (shards), ``beta`` (quantity).
    """
    train, test, parts = _split(dataset, num_clients, partition_scheme, seed, partition_kwargs)
    loss = "logistic" if train.num_classes == 2 else "cross_entropy"
    in_features = math.prod(train.x.shape[1:])
    net = make_model(model, in_features, train.num_classes, hidden=hidden)
    clients = [(train.x[p], train.y[p]) for p in parts]
    label = f"{dataset}/{partition_scheme}{_kw(partition_kwargs)}/{num_clients}/{model}"
    task = from_client_arrays(label, clients, net, loss, weights=weights, l2=l2, test=test, dtype=dtype)
    task.partition = parts  # kept for plots of the label mix
    return task


def least_squares_task(num_clients: int = 32, dim: int = 100, seed: int = 0, *, noise: float = 0.1,
                       dtype: torch.dtype = torch.float64) -> Task:
    """The CEADMM paper's heterogeneous linear regression: f_i = (1 / 2 d_i)||A_i x - b_i||^2,
    w_i = 1 / m (the paper's f_i = 1/2||A_i x - b_i||^2 with w_i = 1/(m d_i): the same F)."""
    clients = heterogeneous_least_squares(num_clients, dim, np.random.default_rng([seed, 0]), noise=noise)
    net = make_model("linear", dim, 1)
    return from_client_arrays(f"least_squares/{num_clients}x{dim}", clients, net, "squared",
                              weights="uniform", dtype=dtype)


def synthetic_task(alpha: float = 1.0, beta: float = 1.0, num_clients: int = 30, seed: int = 0,
                   model: str = "logistic") -> Task:
    """Synthetic(alpha, beta) of Li et al. with multinomial logistic regression (or an MLP)."""
    clients = synthetic_li(num_clients, alpha, beta, np.random.default_rng([seed, 0]))
    net = make_model(model, clients[0][0].shape[1], 10)
    return from_client_arrays(f"synthetic({alpha},{beta})/{num_clients}", clients, net, "cross_entropy")


def qsar_logistic_task(num_clients: int = 64, mu: float = 1e-3, seed: int = 0,
                       dtype: torch.dtype = torch.float64) -> Task:
    """l2-logistic regression on QSAR oral toxicity, rows split evenly (CEADMM paper, Sec. 5)."""
    train, test = load_dataset("qsar", seed=seed)
    parts = np.array_split(np.arange(len(train)), num_clients)
    clients = [(train.x[p], train.y[p]) for p in parts]
    net = make_model("logistic", train.x.shape[1], 2)
    return from_client_arrays(f"qsar/{num_clients}", clients, net, "logistic", weights="size",
                              l2=mu, test=test, dtype=dtype)


def _split(dataset: str, num_clients: int, scheme: str, seed: int, partition_kwargs: dict):
    """(train, test, per-client index arrays): the dataset split by the seeded partitioner."""
    train, test = load_dataset(dataset)
    rng = np.random.default_rng([seed, 0])
    return train, test, partition(train.y.numpy(), num_clients, scheme, rng, **partition_kwargs)


def _kw(kwargs: dict) -> str:
    return "(" + ",".join(f"{k}={v}" for k, v in sorted(kwargs.items())) + ")" if kwargs else ""


def clustering_task(dataset: str = "mnist", num_clients: int = 100, partition_scheme: str = "dirichlet",
                    num_clusters: int = 10, seed: int = 0, **partition_kwargs) -> Task:
    """Federated clustering of a dataset's inputs (labels only decide the non-IID split): the shared
    block is ``num_clusters`` centroids, each client's private block its assignments (see
    :mod:`fedcompanion.algorithms.two_block`). Targets start at zero; the algorithm fills them."""
    train, _, parts = _split(dataset, num_clients, partition_scheme, seed, partition_kwargs)
    x = train.x.flatten(1)
    clients = [(x[p], np.zeros((len(p), num_clusters), dtype=np.float32)) for p in parts]
    net = Centroids(num_clusters, x.shape[1])
    label = f"{dataset}-clustering/{partition_scheme}{_kw(partition_kwargs)}/{num_clients}/C={num_clusters}"
    task = from_client_arrays(label, clients, net, "cluster", weights="size")
    task.partition = parts
    return task
