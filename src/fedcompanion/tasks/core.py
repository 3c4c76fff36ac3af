r"""A task: model + loss + per-client data + evaluation.

The federated objective is

.. math::  F(x) = \sum_{i=1}^N w_i f_i(x),\qquad
           f_i(x) = \frac{1}{n_i}\sum_{j \in D_i} \ell(x; \xi_j) + \frac{\mu_i}{2}\|x\|^2
                    + \lambda \sum_k \frac{x_k^2}{1 + x_k^2},

with client weights :math:`w_i` summing to one (by default :math:`w_i = n_i / n`, so that F is
the mean loss over all samples), an l2 weight :math:`\mu_i` (one for all clients, or one each) and the weight
:math:`\lambda` of a non-convex regulariser (0 by default; see
:class:`~fedcompanion.losses.SaturatingSquare`: only the ADMM family solves such tasks). Parameters
are one flat vector ``x`` of shape ``[P]``; the model is called with ``torch.func.functional_call``. Client
data are stored back to back (``x_all[offsets[i]:offsets[i+1]]``) so that per-client quantities are one pass
over the data. A task is never changed by a run: whatever an algorithm keeps lives in its own state.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from ..data.loaders import ArrayDataset, detached, hash_tensors
from ..infra.fingerprint import fingerprint, in_package
from ..losses import SATURATING_SQUARE, Loss, get_loss
from ..models import check_model, check_repeatable
from ..validation import ConfigError, check_choice, check_device, check_number


@dataclass(frozen=True)
class ClientSplit:
    """Per-client data laid out back to back: client i holds rows ``offsets[i]:offsets[i+1]``."""

    x: torch.Tensor
    y: torch.Tensor
    offsets: torch.Tensor

    @property
    def sizes(self) -> torch.Tensor:
        """Rows per client, [N]."""
        return self.offsets[1:] - self.offsets[:-1]


@dataclass(frozen=True)
class Task:
    r"""Everything an algorithm may know about a federated problem. Frozen: a run, an algorithm or a builder that
    wants another task makes one (``dataclasses.replace``, :meth:`to`), so nothing can change a task under a run.

    Attributes:
        name: short description used in results.
        model: the module whose parameters are flattened into ``x`` (a template: its own parameters are
            only read by :meth:`init_params`).
        loss: a :class:`~fedcompanion.losses.Loss` or its name (``cross_entropy``, ``logistic``, ``squared``,
            ``cluster``).
        x_all, y_all: every client's training data, back to back.
        offsets: client ``i`` holds rows ``offsets[i]:offsets[i+1]``.
        weights: :math:`w_i`, a float64 tensor summing to one.
        l2: :math:`\mu_i`, the l2 regulariser inside every :math:`f_i` (a number, or one per client).
        test: held-out data for the global model's accuracy (or ``None``).
        client_test: each client's own held-out split (:class:`ClientSplit`), for per-client (fairness)
            metrics (or ``None``).
        partition: for a split dataset, each client's indices into it (for label-mix plots).
        initializer: ``seed -> x`` replacing the model's own initialisation (e.g. centroids at data points).
        labels: true labels of the training rows where the targets are not labels (clustering), for evaluation.
        nonconvex: :math:`\lambda \ge 0`, the weight of the non-convex regulariser in every :math:`f_i`.
    """

    name: str
    model: nn.Module
    loss: Loss | str
    x_all: torch.Tensor
    y_all: torch.Tensor
    offsets: torch.Tensor
    weights: torch.Tensor
    l2: float | torch.Tensor = 0.0
    test: ArrayDataset | None = None
    dtype: torch.dtype = torch.float32
    client_test: ClientSplit | None = None
    partition: list | None = field(default=None, repr=False)  # index arrays into the source dataset
    initializer: Callable[[int], torch.Tensor] | None = field(default=None, repr=False)
    labels: torch.Tensor | None = field(default=None, repr=False)
    nonconvex: float = 0.0
    _shapes: list = field(init=False, repr=False)

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)  # (frozen: the constructor's own normalisation only)
        set_("loss", get_loss(self.loss) if isinstance(self.loss, str) else self.loss)
        for name in ("x_all", "y_all", "labels", "test", "client_test"):  # data, not a graph: detached
            set_(name, detached(getattr(self, name)))
        check_model(self.model, f"task {self.name!r}")  # before the cast, which would drop an imaginary part
        set_("model", self.model.to(self.dtype))
        set_("_shapes", [(n, p.shape, p.numel()) for n, p in self.model.named_parameters()])
        n = self.num_clients
        if len(self.x_all) != len(self.y_all) or int(self.offsets[-1]) != len(self.y_all):
            raise ConfigError(f"task {self.name!r}: {len(self.x_all)} feature rows, {len(self.y_all)} targets and "
                              f"offsets ending at {int(self.offsets[-1])} must agree")
        if (self.client_sizes <= 0).any():
            raise ConfigError(f"clients {torch.nonzero(self.client_sizes <= 0).flatten().tolist()} hold no data")
        if self.weights.shape != (n,) or (self.weights < 0).any() or not torch.isclose(
                self.weights.sum(), torch.tensor(1.0, dtype=self.weights.dtype)):
            raise ConfigError(f"client weights must be {n} numbers >= 0 summing to 1, got {self.weights.tolist()}")
        if isinstance(self.l2, torch.Tensor):
            if self.l2.shape != (n,) or (self.l2 < 0).any():
                raise ConfigError(f"l2 must be a number >= 0 or {n} numbers >= 0, got shape {tuple(self.l2.shape)}")
        else:
            check_number("l2", self.l2, low=0.0)
        check_number("nonconvex", self.nonconvex, low=0.0)
        self.loss.check_targets(self.y_all, f"task {self.name!r}")
        with torch.no_grad():  # one row through a copy in eval mode: the template's buffers are not touched
            out = copy.deepcopy(self.model).eval()(self.x_all[:1])
        if not isinstance(out, torch.Tensor):
            raise ConfigError(f"task {self.name!r}: the model returns {type(out).__name__}; it must return one tensor")
        self.loss.check_outputs(out, self.y_all, f"task {self.name!r}")
        check_repeatable(self.model, self.x_all[:4], f"task {self.name!r}")

    # ----------------------------------------------------------------- structure
    @property
    def num_clients(self) -> int:
        """N."""
        return len(self.offsets) - 1

    @property
    def num_params(self) -> int:
        """P, the length of the flat parameter vector."""
        return sum(n for _, _, n in self._shapes)

    @property
    def device(self) -> torch.device:
        """Where the data live (the runs compute there)."""
        return self.x_all.device

    @property
    def client_sizes(self) -> torch.Tensor:
        """n_i, rows per client, [N]."""
        return self.offsets[1:] - self.offsets[:-1]

    @functools.cached_property
    def client_l2(self) -> torch.Tensor:
        """mu_i of every client, [N] (float64, on the CPU)."""
        return torch.as_tensor(self.l2, dtype=torch.float64).cpu().expand(self.num_clients).clone()

    def client_data(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client i's (features, targets), views into the stacked data."""
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.x_all[lo:hi], self.y_all[lo:hi]

    def layout(self) -> dict[str, tuple[int, torch.Size]]:
        """Where each named parameter lives in a flat vector [P]: name -> (start, shape)."""
        out, start = {}, 0
        for name, shape, n in self._shapes:
            out[name] = (start, shape)
            start += n
        return out

    def unflatten(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """View a flat vector [..., P] as the model's named parameters (leading dims kept)."""
        lead = x.shape[:-1]
        return {name: x[..., start : start + shape.numel()].reshape(*lead, *shape)
                for name, (start, shape) in self.layout().items()}

    def init_params(self, seed: int, zeros: bool = False) -> torch.Tensor:
        """The initial model under ``seed`` (global RNG untouched), flattened: the task's ``initializer`` if it
        has one, else the model's default initialisation."""
        if zeros:
            return torch.zeros(self.num_params, dtype=self.dtype, device=self.device)
        if self.initializer is not None:
            return self.initializer(seed).to(self.device, self.dtype)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for m in self.model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
        return torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]).to(self.device, self.dtype)

    def to(self, device: str | torch.device) -> Task:
        """A copy of the task with its data and model on ``device`` (``self`` if already there)."""
        device = torch.device(check_device(device))
        if device == self.device:
            return self
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        test = None if self.test is None else ArrayDataset(move(self.test.x), move(self.test.y), self.test.num_classes)
        split = self.client_test
        if split is not None:
            split = ClientSplit(move(split.x), move(split.y), split.offsets)
        return dataclasses.replace(self, model=copy.deepcopy(self.model).to(device), x_all=move(self.x_all),
                                   y_all=move(self.y_all), test=test, client_test=split, labels=move(self.labels))

    # ----------------------------------------------------------------- losses
    def forward(self, x: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """The model's outputs at the flat parameters x for ``inputs`` (a functional call: the template stays as it
        is)."""
        return functional_call(self.model, self.unflatten(x), (inputs,))

    def loss_fn(self, x: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor, l2: float = 0.0,
                nonconvex: float = 0.0) -> torch.Tensor:
        """Mini-batch estimate of f_i: mean per-sample loss + (l2/2)||x||^2 + nonconvex r(x) (pass the client's l2
        and the task's ``nonconvex``)."""
        value = self.loss.per_sample(self.forward(x, inputs), targets).mean()
        if l2:
            value = value + 0.5 * l2 * (x * x).sum()
        if nonconvex:
            value = value + nonconvex * SATURATING_SQUARE.value(x)
        return value

    def client_loss(self, i: int, x: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """f_i(x) on client i's full data (or on its ``rows``)."""
        return self.loss_fn(x, *self._client_rows(i, rows), float(self.client_l2[i]), self.nonconvex)

    def client_grad(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """grad f_i(x) on client i's full data."""
        return self.client_value_and_grad(i, x)[1]

    def client_value_and_grad(self, i: int, x: torch.Tensor, rows: torch.Tensor | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor]:
        """(f_i(x), grad f_i(x)) on client i's full data (or on its ``rows``), by one autograd pass (the bits of
        ``torch.func.grad_and_value``, without its first call's import of ``torch._dynamo``: seconds per process)."""
        leaf = x.detach().requires_grad_(True)
        with torch.enable_grad():
            value = self.loss_fn(leaf, *self._client_rows(i, rows), float(self.client_l2[i]), self.nonconvex)
        (grad,) = torch.autograd.grad(value, leaf)
        return value.detach(), grad

    def _client_rows(self, i: int, rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = self.client_data(i)
        if rows is None:
            return inputs, targets
        return inputs[rows.to(inputs.device)], targets[rows.to(targets.device)]

    def global_loss(self, x: torch.Tensor) -> float:
        """F(x) = sum_i w_i f_i(x)."""
        return float(self.evaluate_clients(x)[0].double() @ self.weights.double().to(self.device))

    def client_means(self, per_sample: torch.Tensor, offsets: torch.Tensor | None = None) -> torch.Tensor:
        """Each client's mean of a per-sample quantity laid out like ``y_all`` (or like ``offsets``): [n] -> [N]."""
        sizes = self.client_sizes if offsets is None else offsets[1:] - offsets[:-1]
        owner = torch.repeat_interleave(torch.arange(self.num_clients), sizes).to(per_sample.device)
        total = torch.zeros(self.num_clients, dtype=per_sample.dtype, device=per_sample.device)
        return total.index_add_(0, owner, per_sample) / sizes.to(per_sample)

    @torch.no_grad()
    def evaluate_clients(self, x: torch.Tensor, chunk: int = 8192, split: ClientSplit | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss_i(x), accuracy_i(x)) for every client, in one pass over its training data (or over ``split``).

        On the training data the loss is f_i(x) (regularisers included); on a held-out split, the data term only."""
        xs, ys, offsets = (self.x_all, self.y_all, None) if split is None else (split.x, split.y, split.offsets)
        losses, correct = [], []
        for start in range(0, len(ys), chunk):
            out = self.forward(x, xs[start : start + chunk])
            y = ys[start : start + chunk]
            losses.append(self.loss.evaluate(out, y))
            correct.append(self.loss.correct(out, y))
        loss, acc = self.client_means(torch.cat(losses), offsets), self.client_means(torch.cat(correct), offsets)
        if split is None and bool((self.client_l2 != 0).any()):
            loss = loss + 0.5 * self.client_l2.to(loss) * float((x * x).sum())
        if split is None and self.nonconvex:
            loss = loss + self.nonconvex * float(SATURATING_SQUARE.value(x))
        return loss, acc

    @torch.no_grad()
    def test_metrics(self, x: torch.Tensor) -> dict[str, float]:
        """test_loss and (for a labelled loss) test_accuracy of x on the task's test data; empty without test data."""
        if self.test is None:
            return {}
        out = self.forward(x, self.test.x.to(self.dtype))
        y = self.test.y.to(self.y_all.dtype)
        values = {"test_loss": float(self.loss.evaluate(out, y).mean())}
        if self.loss.labelled:
            values["test_accuracy"] = float(self.loss.correct(out, y).mean())
        return values

    # ----------------------------------------------------------------- convex tasks
    @functools.cached_property
    def optimum(self) -> tuple[torch.Tensor, float]:
        """(x*, F(x*)) for convex tasks: closed form (least squares) or Newton's method (logistic).

        Raises ``NotImplementedError`` for non-convex models and for a non-convex regulariser.
        """
        if self.nonconvex:
            raise NotImplementedError(f"task {self.name!r} has a non-convex regulariser (nonconvex="
                                      f"{self.nonconvex}): it has no global optimum to compute")
        from .convex import convex_optimum

        return convex_optimum(self)

    def client_blocks(self):
        """Every client's linear design as one zero-padded block (:class:`~.convex.ClientBlocks`): the ADMM
        family's data, built once per task (its values do not depend on what used it before). Raises
        ``NotImplementedError`` unless the model is linear with a least-squares or logistic loss."""
        return self._client_blocks

    @functools.cached_property
    def _client_blocks(self):
        from .convex import ClientBlocks

        return ClientBlocks.from_task(self)


# --------------------------------------------------------------------- builders
def _as_tensor(value, dtype, what: str) -> torch.Tensor:
    if not isinstance(value, (torch.Tensor, np.ndarray, list, tuple)):
        raise ConfigError(f"{what} must be an array or tensor, got {type(value).__name__}")
    t = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    return t.to(dtype) if dtype is not None else t


def _stack_clients(clients, loss: Loss, dtype, what: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_all, y_all, offsets) from one (features, targets) pair per client, checked."""
    if not clients:
        raise ConfigError(f"{what}: no clients given")
    xs, ys = [], []
    for i, pair in enumerate(clients):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ConfigError(f"{what}: client {i} must be a (features, targets) pair")
        x, y = _as_tensor(pair[0], dtype, f"client {i} features"), _as_tensor(pair[1], None, f"client {i} targets")
        if x.is_floating_point() and not torch.isfinite(x).all():
            raise ConfigError(f"{what}: client {i} features contain NaN or inf")
        if len(x) != len(y):
            raise ConfigError(f"{what}: client {i} has {len(x)} feature rows but {len(y)} targets")
        if len(y) == 0:
            raise ConfigError(f"{what}: client {i} holds no data")
        loss.check_targets(y, f"{what}: client {i}")
        xs.append(x)
        ys.append(y.to(loss.target_dtype(dtype)))
    sizes = torch.tensor([len(y) for y in ys])
    return torch.cat(xs), torch.cat(ys), torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])


def from_client_arrays(
    name: str,
    clients: list[tuple[np.ndarray, np.ndarray]],
    model: nn.Module,
    loss: str,
    *,
    weights: str = "size",
    l2: float | torch.Tensor = 0.0,
    test: ArrayDataset | None = None,
    client_test: list[tuple[np.ndarray, np.ndarray]] | None = None,
    dtype: torch.dtype = torch.float32,
    nonconvex: float = 0.0,
) -> Task:
    """Build a task from one (features, targets) pair per client (and optionally each client's held-out pair).

    ``weights='size'`` gives w_i = n_i / n; ``'uniform'`` gives w_i = 1 / N. ``nonconvex``: the weight of the
    non-convex regulariser (see :class:`Task`).
    """
    if not isinstance(name, str):
        raise ConfigError(f"name must be a string, got {type(name).__name__}")
    check_choice("weights", weights, ("size", "uniform"))
    loss_obj = get_loss(loss) if isinstance(loss, str) else loss
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    x_all, y_all, offsets = _stack_clients(clients, loss_obj, dtype, f"task {name!r}")
    sizes, n = offsets[1:] - offsets[:-1], len(offsets) - 1
    w = sizes.double() / sizes.sum() if weights == "size" else torch.ones(n, dtype=torch.float64) / n
    if test is not None:
        test = ArrayDataset(test.x.to(dtype), test.y.to(loss_obj.target_dtype(dtype)), test.num_classes)
    split = None
    if client_test is not None:
        if len(client_test) != n:
            raise ConfigError(f"client_test has {len(client_test)} clients, the training data {n}")
        split = ClientSplit(*_stack_clients(client_test, loss_obj, dtype, f"task {name!r} (held-out)"))
    return Task(name, model, loss_obj, x_all, y_all, offsets, w, l2, test, dtype, split, nonconvex=nonconvex)


def task_digest(task: Task) -> str:
    """SHA-256 (16 hex digits) of what a task's runs can depend on: its data, weights, regularisers, test data, loss
    and model (structure and initial parameters)."""
    extra = f"|nonconvex={task.nonconvex!r}" if task.nonconvex else ""  # (absent: the digests of before)
    if not in_package(type(task.loss)):  # a user's loss: its code, which its name alone would not follow
        extra += f"|loss_code={fingerprint([type(task.loss)])}"
    digest = hashlib.sha256(f"{task.name}|{task.loss!r}|{task.model!r}|{task.dtype}{extra}".encode())
    test = (None, None) if task.test is None else (task.test.x, task.test.y)
    split = (None, None, None) if task.client_test is None else dataclasses.astuple(task.client_test)
    l2 = task.l2 if isinstance(task.l2, torch.Tensor) else torch.tensor(float(task.l2))
    hash_tensors(digest, task.x_all, task.y_all, task.offsets, task.weights, l2, *test, *split, task.init_params(0))
    return digest.hexdigest()[:16]
