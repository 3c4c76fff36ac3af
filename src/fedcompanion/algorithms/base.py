"""What every federated algorithm provides, and the registry ``make(name, **hyperparameters)``.

An algorithm is a pure state machine (optax / FedJAX style). Its object holds only the hyperparameters,
validated in ``__init__``; everything a run keeps, constants derived from the task included, is in the
:class:`~fedcompanion.protocol.State` that ``init`` returns, split into the server's part and each
client's part. The round functions (see :mod:`fedcompanion.protocol`) take a state and return new
values; they change neither the algorithm object, nor the task, nor the state they were given, so one
object can drive any number of runs, interleaved or not.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from ..protocol import ActiveClients, LocalObjective, LocalResult, RoundInfo, State, Watch
from ..registry import Registry
from ..validation import ConfigError


@dataclass(frozen=True)
class ServerState:
    """The global model x_0 (flat [P]); subclasses add what their server keeps."""

    x: torch.Tensor


Messages = dict[str, torch.Tensor]


class Algorithm:
    """Base class of every algorithm. Subclasses set ``name`` and implement the round functions.

    Attributes:
        name: registry name.
        needs_probe: whether ``client_update`` needs the probe (f_i(x_0), grad f_i(x_0)) of each active client.
        probe_samples: ``None``: the probe uses the client's full data; a number: a random subset of that many rows.
        probe_gradient: ``False`` if ``client_update`` uses only the probe's losses (its gradients are then ``None``
            and not computed).
        every_client: every client must work in every round (``fc.run`` refuses partial participation).
        solves_exactly: its local objectives always declare an exact solve (:class:`~fedcompanion.protocol.ExactSolve`,
            done by :mod:`fedcompanion.engine.exact` whatever the engine): no engine's SGD kernel runs for it (its
            runs' keys leave the engine's code out), and a task's non-convex regulariser is trained (the SGD engines
            refuse such a task).
        linear_only: it runs on tasks with a linear model only (a config is checked when it is validated).

    Hooks the driver reads, with defaults: ``watch(task, state)`` (the :class:`~fedcompanion.protocol.Watch` after a
    round: a loss it judges for divergence, a stationarity it judges against ``tol``; default: whether the global
    model is finite) and ``diagnostics(task, state, previous)`` (more values to record at each evaluation, from the
    state and the one before the last round, ``None`` at round 0).
    """

    name = "base"
    needs_probe = False
    probe_samples = None
    probe_gradient = True
    every_client = False
    solves_exactly = False
    linear_only = False

    def hyperparameters(self) -> dict:
        """The constructor arguments (for results tables and cache keys)."""
        return {name: getattr(self, name) for name in inspect.signature(type(self)).parameters}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({args})"

    # ------------------------------------------------------------------ state
    def initial_model(self, task, seed: int) -> torch.Tensor:
        """x^0 when ``fc.run`` is given no ``init``: the task's initialisation under ``seed``."""
        return task.init_params(seed)

    def init(self, task, x0: torch.Tensor) -> State:
        """The state at round 0: the server's part and every client's part."""
        return State(self.init_server(task, x0), self.init_clients(task, x0))

    def init_server(self, task, x0: torch.Tensor):
        """The server's state at the start of a run from the initial model x0 (default: x0 alone)."""
        return ServerState(x0.clone())

    def init_clients(self, task, x0: torch.Tensor) -> dict[str, tuple[torch.Tensor, ...]]:
        """Each client's state at the start: name -> N entries (default: none). A dual or control variate starts as
        ZeroRows, so an unsampled client costs nothing."""
        return {}

    # ------------------------------------------------------------------ one round
    def broadcast(self, state: State) -> Messages:
        """What the server sends every active client (default: the global model)."""
        return {"x": state.server.x}

    def local_objective(self, task, received: Messages, clients: ActiveClients, info: RoundInfo) -> LocalObjective:
        """The round's local objective h_i(x) = s_i f_i(x) + <c_i, x> + (rho_i / 2)||x - z_i||^2 for the active clients,
        with their step counts and step size; by default plain SGD on f_i from the broadcast model (c = 0, rho = 0,
        s = 1, z = x_0)."""
        return LocalObjective.sgd(received["x"], info.steps, info.lr)

    def client_update(self, task, received: Messages, clients: ActiveClients, info: RoundInfo,
                      result: LocalResult) -> tuple[dict, Messages]:
        """(the active clients' new state entries, the uploads: name -> [K, ...])."""
        raise NotImplementedError

    def server_update(self, server, info: RoundInfo, uploads: Messages):
        """The new server state, from the old one and what the clients uploaded."""
        raise NotImplementedError

    # ------------------------------------------------------------------ what the driver reads
    def watch(self, task, state: State) -> Watch:
        """The round's :class:`~fedcompanion.protocol.Watch` (default: whether the global model is finite)."""
        return Watch(finite=bool(torch.isfinite(state.x).all()))

    def diagnostics(self, task, state: State, previous: State | None) -> dict[str, float]:
        """Values recorded at each evaluation besides the driver's own (default: none)."""
        return {}

    @classmethod
    def has_own_watch(cls) -> bool:
        """Whether it defines its own ``watch`` (the ADMM family's: a loss of its own, judged for divergence, and a
        stationarity, judged against ``tol``)."""
        return cls.watch is not Algorithm.watch


def delta(received: Messages, result: LocalResult) -> torch.Tensor:
    """Delta_i = x_i - x_0 of the active clients, [K, P]."""
    return result.x - received["x"]


def _check_algorithm(name: str, cls: type) -> type:
    if not isinstance(cls, type) or not issubclass(cls, Algorithm):
        raise ConfigError(f"algorithm {name!r}: register an algorithm class (a subclass of Algorithm), got {cls!r}")
    if getattr(cls, "name", None) != name:
        raise ConfigError(f"algorithm {name!r}: the class's name attribute must be the name it is registered under, "
                          f"got {getattr(cls, 'name', None)!r}")
    return cls


REGISTRY = Registry("algorithm", _check_algorithm)


def register_algorithm(name: str, cls: type | None = None):
    """Make ``make(name, ...)`` build ``cls`` (whose ``name`` attribute is ``name``); without ``cls``, a class
    decorator. A user's class too: a sweep's workers receive it, so define it in an importable module to run it with
    ``jobs > 1``."""
    return REGISTRY.register(name, cls)


def register(cls: type) -> type:
    """Class decorator: ``register_algorithm(cls.name, cls)`` (the name read from the class)."""
    if not isinstance(cls, type) or not isinstance(getattr(cls, "name", None), str):
        raise ConfigError(f"register takes an algorithm class with a name attribute, got {cls!r}")
    return register_algorithm(cls.name, cls)


def make(name: str, **hyperparameters):
    """Build a registered algorithm, e.g. ``make('fedprox', mu=0.01)``."""
    cls = REGISTRY.lookup(name)
    allowed = list(inspect.signature(cls).parameters)
    unknown = sorted(set(hyperparameters) - set(allowed))
    if unknown:
        raise ConfigError(f"{name} has no hyperparameter {unknown}; its hyperparameters are {allowed}")
    return cls(**hyperparameters)
