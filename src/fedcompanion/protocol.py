r"""The seam between algorithms and engines: what a round tells a client, what a client minimises, what
the algorithm keeps. Algorithms and engines both import this module; neither imports the other.

Every algorithm in the three papers asks each active client i to run :math:`Q_i` steps of

.. math::  x^{t+1} = x^t - \eta_i \nabla h_i(x^t),\qquad
           h_i(x) = s_i f_i(x) + \langle c_i, x\rangle + \tfrac{\rho_i}{2}\|x - z_i\|^2,

from :math:`x^0` (usually the global model), with :math:`\nabla f_i` estimated on a mini-batch
(:class:`LocalObjective`). FedAvg: c = 0, rho = 0. FedProx: rho = mu. SCAFFOLD: c = c - c_i.
FedADMM/FedVRA/FedDyn: c = -lambda_i, rho = gamma_i, z = x_0.

A round, for an algorithm ``alg`` with state ``state`` (:class:`State`)::

    received  = alg.broadcast(state)                                  # what the server sends
    objective = alg.local_objective(task, received, clients, info)    # h_i of the active clients
    x_local   = engine(task, objective, ...)                          # Q_i steps on h_i
    new_clients, uploads = alg.client_update(task, received, clients, info, result)
    server    = alg.server_update(state.server, info, uploads)        # from what was uploaded only

``clients`` (:class:`ActiveClients`) is the active clients' own part of the state. What crosses the network
is exactly ``received`` and ``uploads``, so communication is counted from them
(:func:`floats`), and a Flower client can keep its own part of ``state.clients`` and run the same functions.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import torch

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RoundInfo:
    """What the server knows at the start of round r.

    Attributes:
        round: r (0-based).
        clients: active client ids, int64 [K], sorted.
        probs: inclusion probabilities p_i^r of all N clients, [N].
        steps: local step counts Q_i^r of the active clients, int64 [K].
        lr: the client step size eta.
        weights: client weights w_i of all N clients, [N], summing to one.
    """

    round: int
    clients: torch.Tensor
    probs: torch.Tensor
    steps: torch.Tensor
    lr: float
    weights: torch.Tensor

    @property
    def active_weights(self) -> torch.Tensor:
        """w_i of the active clients, [K]."""
        return self.weights[self.clients]

    @property
    def active_probs(self) -> torch.Tensor:
        """p_i^r of the active clients, [K]."""
        return self.probs[self.clients]


@dataclass(frozen=True)
class LocalObjective:
    r"""h_i for the K active clients, in client order, and how to minimise it.

    Attributes:
        start: x^0, shape [K, P].
        anchor: z_i, shape [K, P] (the proximal centre).
        prox: rho_i >= 0, shape [K].
        linear: c_i, shape [K, P] (or a sequence of K rows [P], e.g. :class:`Negated`), or ``None`` for zero.
        scale: s_i, shape [K] (the weight of the data term).
        steps: Q_i, int64 [K].
        lr: eta_i, shape [K].
        targets: per active client, targets replacing the client's stored ones (the two-block
            extension's private assignments), or ``None``.
        momentum, weight_decay: heavy-ball momentum mu and weight decay of the local SGD (torch.optim.SGD's
            form: b <- mu b + (grad h + wd x), x <- x - eta b); set by the run from ``LocalWork``.
        momentum_buffer: the buffers b at the start [K, P] (carried across rounds), or ``None`` for zero.
        solve: ``None``: ``steps`` steps of (mini-batch) SGD by the run's engine; an :class:`ExactSolve`: exactly,
            or by one linearised step, whatever the engine.
    """

    start: torch.Tensor
    anchor: torch.Tensor
    prox: torch.Tensor
    linear: torch.Tensor | Sequence[torch.Tensor] | None
    scale: torch.Tensor
    steps: torch.Tensor
    lr: torch.Tensor
    targets: tuple[torch.Tensor, ...] | None = None
    momentum: float = 0.0
    weight_decay: float = 0.0
    momentum_buffer: torch.Tensor | None = None
    solve: ExactSolve | None = None

    @classmethod
    def sgd(cls, x0: torch.Tensor, steps: torch.Tensor, lr: float, *, prox: float | torch.Tensor = 0.0,
            linear: torch.Tensor | None = None, **kwargs) -> LocalObjective:
        """Start and anchor at the global model x0 (shared by all K clients), with one step size."""
        k = len(steps)
        x = x0.expand(k, -1)
        prox = torch.as_tensor(prox, dtype=x0.dtype, device=x0.device).expand(k)
        full = torch.full((k,), float(lr), dtype=x0.dtype, device=x0.device)
        return cls(x, x, prox, linear, torch.ones_like(full), steps, full, **kwargs)

    def replace(self, **changes) -> LocalObjective:
        """A copy with ``changes`` applied (the objective is frozen)."""
        return dataclasses.replace(self, **changes)


LOCAL_SOLVERS = ("factored", "cg", "cg_warm")  # an exact least-squares solve: a cached factor, or CG (two kinds)


@dataclass(frozen=True)
class ExactSolve:
    """How a :class:`LocalObjective` is minimised when not by SGD (the ADMM family, on a linear model): ``method``
    ``"exact"`` (by ``local_solver``, one of :data:`LOCAL_SOLVERS`, or Newton-CG to ``tol``), ``"linearized_server"``
    (f linearised at the anchor, whose gradient is ``gradient``) or ``"linearized_local"`` (at the start, whose
    gradient is ``gradient``, with curvature r_i = ``curvature_scale`` for ``curvature="lipschitz"`` or the Gram
    matrix's through the Woodbury ``factor``); ``factor``: the cached factor where the solve uses one. The formulas:
    :mod:`fedcompanion.engine.exact`, which does it whatever the engine."""

    method: str
    local_solver: str = "factored"
    curvature: str = "lipschitz"
    tol: float = 1e-10
    gradient: torch.Tensor | None = None
    curvature_scale: torch.Tensor | None = None
    factor: object = None


class Negated(Sequence):
    """K rows ``-rows[k]`` (a linear term c_i = -lambda_i), each negated when indexed; an engine that recognises
    the type folds the sign into its own arithmetic instead (no pass over the K rows just to negate them)."""

    def __init__(self, rows: Sequence[torch.Tensor]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, k):
        return Negated(self.rows[k]) if isinstance(k, slice) else torch.neg(self.rows[k])


@dataclass(frozen=True)
class LocalResult:
    """What local work returned for the K active clients: the final models x_i [K, P], the objective they
    minimised, the probe (f_i(x_0) [K], grad f_i(x_0) [K, P]) where the algorithm asked for one, and the final
    momentum buffers where the local optimiser has momentum."""

    x: torch.Tensor
    objective: LocalObjective
    probe: tuple[torch.Tensor, torch.Tensor] | None = None
    momentum_buffer: torch.Tensor | None = None


@dataclass(frozen=True)
class State:
    """Everything a run keeps between rounds.

    Attributes:
        server: what the server keeps (a frozen dataclass of the algorithm's; ``server.x`` is the global model).
        clients: what each client keeps, name -> a tuple of N per-client tensors (client i's entry is
            ``clients[name][i]``; entries are never changed in place, a new tuple replaces the old one).
    """

    server: object
    clients: Mapping[str, tuple[torch.Tensor, ...]] = field(default_factory=dict)

    @property
    def x(self) -> torch.Tensor:
        """The global model."""
        return self.server.x

    def rows(self, name: str) -> torch.Tensor:
        """Every client's entry ``name`` stacked into [N, ...] (memory for all N: for inspection, not for a run)."""
        return torch.stack(list(self.clients[name]))

    def client(self, i: int) -> dict[str, torch.Tensor]:
        """Client i's own part of the state (what a Flower client keeps)."""
        return {name: values[i] for name, values in self.clients.items()}

    def active(self, clients: torch.Tensor) -> ActiveClients:
        """The client state of the active clients (a view: nothing is copied)."""
        return ActiveClients(self.clients, clients.tolist())

    def updated(self, server, clients: torch.Tensor, new_values: Mapping[str, object]) -> State:
        """A new state: ``server`` and, for each name in ``new_values``, the active clients' entries replaced."""
        merged = dict(self.clients)
        for name, values in new_values.items():
            merged[name] = replace_entries(merged[name], clients, values)
        return State(server, merged)


class ActiveClients(Mapping):
    """The active clients' part of the state: ``clients[name]`` stacks their entries into [K, ...]
    (on first access), ``clients.entries(name)`` gives them as a list (for entries of unequal shapes)."""

    def __init__(self, clients: Mapping[str, tuple[torch.Tensor, ...]], ids: list[int]):
        self._clients, self._ids, self._stacked = clients, ids, {}

    def entries(self, name: str) -> list[torch.Tensor]:
        """The active clients' entries ``name``, in their order."""
        return [self._clients[name][i] for i in self._ids]

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._stacked and isinstance(self._clients[name], Rows):
            self._stacked[name] = self._clients[name].select(self._ids)
        if name not in self._stacked:
            entries = self.entries(name)
            if entries:
                self._stacked[name] = torch.stack(entries)
            else:  # no active client (Poisson sampling can draw none): an empty [0, ...] of the entries' shape
                template = next(iter(self._clients[name].values())) if isinstance(self._clients[name], dict) \
                    else self._clients[name][0]
                self._stacked[name] = template.new_empty((0, *template.shape))
        return self._stacked[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)


class ZeroRows(Sequence):
    """N per-client entries of which only those set hold memory: an entry never set is ``zero`` (one shared tensor,
    safe because entries are never changed in place). A stateful algorithm's duals or control variates start as
    zero rows, so a run keeps O(clients ever sampled x P) numbers, not N x P, with the same values: an unsampled
    client's row reads as the same zeros a materialised [N, P] block would hold."""

    def __init__(self, n: int, zero: torch.Tensor, rows: dict[int, torch.Tensor] | None = None):
        self._n, self.zero, self.rows = n, zero, dict(rows or {})

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(self._n)))
        if not -self._n <= i < self._n:
            raise IndexError(f"client {i} of {self._n}")
        return self.rows.get(i % self._n, self.zero)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return (self.rows.get(i, self.zero) for i in range(self._n))

    def replaced(self, clients: list[int], values: list[torch.Tensor]) -> ZeroRows:
        """A new ``ZeroRows`` with client ``clients[k]``'s entry set to ``values[k]``."""
        return ZeroRows(self._n, self.zero, {**self.rows, **dict(zip(clients, values))})


class Rows(Sequence):
    """N per-client entries held as one [N, ...] ``block`` (the ADMM family, whose every client works in every round):
    a round of all N reads the block itself and replaces it whole, with no per-entry work."""

    def __init__(self, block: torch.Tensor):
        self.block = block

    def __len__(self) -> int:
        return len(self.block)

    def __getitem__(self, i):
        return self.block[i]

    def select(self, ids: list[int]) -> torch.Tensor:
        """The entries of clients ``ids``, [K, ...] (the block itself for all N in order)."""
        return self.block if ids == list(range(len(self.block))) else self.block[ids]

    def replaced(self, clients: list[int], values) -> Rows:
        """A new ``Rows`` with client ``clients[k]``'s entry set to ``values[k]`` (the old block is not changed)."""
        values = values if isinstance(values, torch.Tensor) else torch.stack(list(values))
        if clients == list(range(len(self.block))):
            return Rows(values)
        return Rows(self.block.index_put((torch.tensor(clients, dtype=torch.long),), values))


def zero_rows(n: int, like: torch.Tensor) -> ZeroRows:
    """N entries, each a zero of ``like``'s shape, dtype and device, none of them held in memory of its own."""
    return ZeroRows(n, torch.zeros_like(like))


def replace_entries(entries, clients: torch.Tensor, values):
    """New per-client entries (a tuple, or :class:`ZeroRows` / :class:`Rows` for those): ``values[k]`` (e.g. row k of
    the round's [K, ...] result) replaces client ``clients[k]``'s entry; the other entries are the same objects.

    An entry that is a view into a larger tensor is copied into memory of its own. A kept row would otherwise keep
    its round's whole [K, P] tensor alive until every one of its K clients has been sampled again: up to several
    times N x P entries in all, where a copy keeps exactly N, and a heap fragmented by those blocks has to grow,
    i.e. take fresh pages from the kernel, each of which faults when first written."""
    ids, own = clients.tolist(), []
    if isinstance(entries, Rows):
        return entries.replaced(ids, values)
    for k in range(len(ids)):
        entry = values[k]
        if isinstance(entry, torch.Tensor) and entry.untyped_storage().nbytes() > entry.nbytes:
            entry = entry.clone()
        own.append(entry)
    if isinstance(entries, ZeroRows):
        return entries.replaced(ids, own)
    new = list(entries)
    for i, entry in zip(ids, own):
        new[i] = entry
    return tuple(new)


def entries_of(values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """[N, ...] -> a tuple of N entries (views: safe, because entries are never changed in place)."""
    return tuple(values.unbind(0))


def floats(message: Mapping[str, torch.Tensor]) -> int:
    """How many numbers a message holds (uploads: all K clients' together; a broadcast: one copy)."""
    return sum(v.numel() for v in message.values())


GLOBAL = -1  # the ``client`` value of history rows that describe the global model, not one client
DIVERGENCE_FACTOR = 1e3  # a run whose loss exceeds this multiple of its initial loss is called diverged


class Watch(NamedTuple):
    """What one round tells the driver's stopping rules (:func:`~fedcompanion.driver.run_rounds`): the ``watch``'s."""

    finite: bool = True  # the model is finite (else the run has diverged, and is not evaluated)
    loss: float | None = None  # a loss the round computed itself (the ADMM family's f(y)), judged for divergence
    stationarity: float | None = None  # ||grad f||^2 at the round's point (the ADMM family's), judged against tol


def has_diverged(loss: float, initial: float, factor: float | None = DIVERGENCE_FACTOR) -> bool:
    """NaN/inf, or (``factor`` not None) a loss above ``factor`` times the initial one (or above ``factor`` if the
    initial loss is 0)."""
    if loss != loss or loss in (float("inf"), float("-inf")):
        return True
    return factor is not None and loss > factor * max(abs(initial), 1.0 if initial == 0 else abs(initial))


class History:
    """A run's history as it is recorded, for ``fc.run`` and the ADMM family's solvers alike: tidy rows
    ``(round, client, metric, value)`` and the seconds of computation up to each recorded round."""

    def __init__(self):
        self.rows: list[tuple] = []
        self.timing: list[tuple[int, float]] = []

    def record(self, r: int, values: Mapping[str, float], compute_time: float | None = None,
               client: int = GLOBAL) -> None:
        """Round r's ``values`` (of the global model, or of ``client``) and, if given, its computation time."""
        self.rows.extend((r, client, name, value) for name, value in values.items())
        if compute_time is not None:
            self.timing.append((r, compute_time))

    def result(self, x: torch.Tensor, status: str, diverged_round: int | None, wall_time: float) -> RunResult:
        """The :class:`RunResult` of what was recorded."""
        import pandas as pd

        history = pd.DataFrame(self.rows, columns=["round", "client", "metric", "value"])
        timing = pd.DataFrame(self.timing, columns=["round", "compute_time"])
        return RunResult(history, x, status, diverged_round, wall_time, timing)


@dataclass
class RunResult:
    """What a run (``fc.run`` or an ADMM-family ``solve``) produced.

    Attributes:
        history: tidy frame with columns ``round, client, metric, value`` (client = -1: global); the same
            config and seed give an equal frame.
        params: the final global model, flat [P].
        status: ``"ok"``, ``"converged"`` (a stopping tolerance was met) or ``"diverged"``.
        diverged_round: the first round whose model or loss was NaN/inf or beyond the divergence factor.
        wall_time: seconds, evaluation included.
        timing: ``round, compute_time`` (seconds of computation up to that round, evaluation excluded), kept
            apart from ``history`` because it changes from run to run.
    """

    history: pd.DataFrame
    params: torch.Tensor
    status: str
    diverged_round: int | None
    wall_time: float
    timing: pd.DataFrame | None = None

    def metric(self, name: str, client: int = GLOBAL):
        """One metric against the round, e.g. ``result.metric('test_accuracy')``."""
        h = self.history
        rows = h[(h.metric == name) & (h.client == client)]
        return rows.set_index("round")["value"]

    @property
    def rounds_run(self) -> int:
        """The last round the history records (fewer than asked if the run diverged)."""
        return int(self.history["round"].max())
