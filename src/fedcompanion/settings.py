"""A run's settings: the arguments of :func:`fedcompanion.run` besides the task, the algorithm and the rounds, checked
once (each number by its rule in :data:`~fedcompanion.validation.ARGUMENTS`) and handed on whole
(:class:`RunSettings`), for every algorithm alike."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from .algorithms.base import Algorithm
from .engine import ENGINES
from .engine.schedule import LocalWork
from .tasks import Task
from .validation import ConfigError, check_argument, check_choice, check_device


class RunSettings(NamedTuple):
    """fc.run's arguments besides the task, the algorithm and the rounds, checked once and handed on whole."""

    clients_per_round: int | None
    seed: int
    engine: str
    lr: float
    local: LocalWork | None
    sampling: str | Callable
    eval_every: int
    per_client_metrics: bool
    extra_metrics: dict | None
    init: torch.Tensor | None
    divergence_factor: float | None
    tol: float | None
    eval_train: bool
    device: str | torch.device | None
    threads: int | None
    progress: bool


def check_engine_task(task) -> None:
    """The engines train the data term and the l2 term; a task with the non-convex regulariser is refused."""
    if task.nonconvex:
        raise ConfigError(f"task {task.name!r} has nonconvex={task.nonconvex}: the engines do not train the "
                          "non-convex regulariser; the ADMM family (fc.make('ceadmm'), 'iceadmm', ...) does")


def check_declared_needs(algorithm, clients_per_round, sampling, tol, num_clients: int | None = None) -> None:
    """What an algorithm (an instance or its class) declares it needs, for :func:`fedcompanion.run` and a config alike:
    a stationarity of its own for ``tol``, and every client in every round if it is ``every_client`` (with a task,
    ``clients_per_round`` may also name all ``num_clients`` of them)."""
    if tol is not None and not algorithm.has_own_watch():
        raise ConfigError(f"tol stops a run on a round's stationarity (||grad f||^2), which {algorithm.name}'s "
                          "rounds do not report; it applies to the ADMM family")
    if algorithm.every_client and (clients_per_round not in (None, num_clients) or sampling not in ("uniform", "full")):
        raise ConfigError(f"{algorithm.name} needs every client in every round (its server step sums every "
                          f"client's upload): leave clients_per_round at None and sampling at 'uniform' or 'full', "
                          f"got clients_per_round={clients_per_round!r}, sampling={sampling!r}")


def check_run_arguments(task, algorithm, rounds, settings: RunSettings) -> None:
    """What every run is checked for (each number by its rule in :data:`~fedcompanion.validation.ARGUMENTS`), and
    what the algorithm declares it needs (every client in every round, a stationarity for ``tol``, an exact solve
    for a non-convex regulariser)."""
    if not isinstance(task, Task):
        raise ConfigError(f"task must be a fedcompanion Task (see fc.tasks), got {type(task).__name__}")
    if isinstance(algorithm, str):
        raise ConfigError(f"algorithm must be an algorithm object, e.g. fc.make({algorithm!r}), not a str")
    if not isinstance(algorithm, Algorithm):
        raise ConfigError(f"algorithm must be made by fc.make(...), got {type(algorithm).__name__}")
    check_argument("rounds", rounds)
    for name in ("seed", "eval_every", "divergence_factor", "tol", "threads", "lr"):
        check_argument(name, getattr(settings, name))
    check_argument("clients_per_round", settings.clients_per_round, high=task.num_clients)
    check_choice("engine", settings.engine, ENGINES)
    if settings.device is not None:
        check_device(settings.device)
    if not algorithm.solves_exactly:
        check_engine_task(task)
    check_declared_needs(algorithm, settings.clients_per_round, settings.sampling, settings.tol, task.num_clients)
    if settings.local is not None and not isinstance(settings.local, LocalWork):
        raise ConfigError(f"local must be a fc.LocalWork(...), got {type(settings.local).__name__}")
    if not isinstance(settings.eval_train, bool):
        raise ConfigError(f"eval_train must be True or False, got {settings.eval_train!r}")
    if not settings.eval_train and task.test is None and not algorithm.has_own_watch():
        raise ConfigError("eval_train=False needs a task with a test set (divergence is judged on the test loss) or "
                          "an algorithm that watches a loss of its own (the ADMM family)")
    init, extra_metrics = settings.init, settings.extra_metrics
    if init is not None:
        if not isinstance(init, torch.Tensor):
            raise ConfigError(f"init must be a torch tensor of shape ({task.num_params},), got {type(init).__name__}")
        if init.shape != (task.num_params,):
            raise ConfigError(f"init must have shape ({task.num_params},) (the model's parameter count), "
                              f"got {tuple(init.shape)}")
        if not init.is_floating_point() or not torch.isfinite(init).all():
            raise ConfigError("init must hold finite floating-point values")
    if extra_metrics is not None:
        if not isinstance(extra_metrics, dict) or not all(callable(f) for f in extra_metrics.values()):
            raise ConfigError("extra_metrics must be a dict of name -> function of the global model")
