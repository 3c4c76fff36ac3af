"""What every federated algorithm provides, and the registry ``make(name, **hyperparameters)``.

An algorithm is small: it chooses the local objective h_i of each active client
(:class:`~fedcompanion.engine.local.LocalObjective`) and turns the returned local models into the
next server state. Hyperparameters are validated in ``__init__``; the state of a run lives in a
small dataclass returned by ``init`` (FedJAX/optax style). Constants derived from the task (e.g.
beta = 1 / sum_i w_i gamma_i) may be cached on the object by ``init``, so an object drives one run
at a time, any number of runs in sequence.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from ..engine.local import LocalObjective, RoundInfo
from ..validation import ConfigError, check_choice


@dataclass
class ServerState:
    """The global model x_0 (flat [P]); subclasses add what their algorithm keeps."""

    x: torch.Tensor


class Algorithm:
    """Base class. Subclasses set the class attributes and implement the three methods.

    Attributes:
        name: registry name.
        upload_vectors, upload_scalars: what each active client sends per round (P floats per vector).
        download_vectors: what the server sends each active client per round.
        needs_probe: whether ``aggregate`` needs (f_i(x_0), grad f_i(x_0)) of the active clients.
    """

    name = "base"
    upload_vectors = 1
    upload_scalars = 0
    download_vectors = 1
    needs_probe = False

    def init(self, task, x0: torch.Tensor) -> ServerState:
        return ServerState(x0.clone())

    def local_objective(self, state: ServerState, info: RoundInfo) -> LocalObjective:
        raise NotImplementedError

    def aggregate(self, state: ServerState, info: RoundInfo, x_local: torch.Tensor,
                  probe: tuple[torch.Tensor, torch.Tensor] | None = None) -> ServerState:
        raise NotImplementedError

    def hyperparameters(self) -> dict:
        """The constructor arguments, for results tables and cache keys."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({args})"


REGISTRY: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make ``cls`` available as ``make(cls.name, ...)``."""
    REGISTRY[cls.name] = cls
    return cls


def make(name: str, **hyperparameters) -> Algorithm:
    """Build a registered algorithm, e.g. ``make('fedprox', mu=0.01)``."""
    check_choice("algorithm", name, REGISTRY)
    cls = REGISTRY[name]
    allowed = list(inspect.signature(cls).parameters)
    unknown = sorted(set(hyperparameters) - set(allowed))
    if unknown:
        raise ConfigError(f"{name} has no hyperparameter {unknown}; its hyperparameters are {allowed}")
    return cls(**hyperparameters)
