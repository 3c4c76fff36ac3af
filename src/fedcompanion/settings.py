"""A run's settings: the arguments of :func:`fedcompanion.run` besides the task, the algorithm and the rounds, checked
once (each number by its rule in :data:`~fedcompanion.validation.ARGUMENTS`) and handed on whole
(:class:`RunSettings`), with what an engine run and the ADMM family each accept."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from .algorithms.base import is_engine_algorithm, is_full_batch
from .engine import DEFAULT_ENGINE, ENGINES
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


# fc.run's arguments that only an engine run uses, with fc.run's defaults: the ADMM family refuses any other value
# (it runs every client in every iteration with its own local step), and a config leaves them out of its key
ENGINE_ONLY = {"clients_per_round": None, "engine": DEFAULT_ENGINE, "lr": 0.05, "local": None, "sampling": "uniform",
               "per_client_metrics": True, "eval_train": True}


def check_engine_task(task) -> None:
    """The engines train the data term and the l2 term; a task with the non-convex regulariser is refused."""
    if task.nonconvex:
        raise ConfigError(f"task {task.name!r} has nonconvex={task.nonconvex}: the engines do not train the "
                          "non-convex regulariser; the ADMM family (fc.make('ceadmm'), 'iceadmm', ...) does")


def check_common_arguments(task, algorithm, rounds, settings: RunSettings) -> None:
    """What every run is checked for, whatever drives it (each number by its rule in
    :data:`~fedcompanion.validation.ARGUMENTS`)."""
    if not isinstance(task, Task):
        raise ConfigError(f"task must be a fedcompanion Task (see fc.tasks), got {type(task).__name__}")
    if isinstance(algorithm, str):
        raise ConfigError(f"algorithm must be an algorithm object, e.g. fc.make({algorithm!r}), not a str")
    if not (is_engine_algorithm(algorithm) or is_full_batch(algorithm)):
        raise ConfigError(f"algorithm must be made by fc.make(...), got {type(algorithm).__name__}")
    check_argument("rounds", rounds)
    for name in ("seed", "eval_every", "divergence_factor", "tol", "threads"):
        check_argument(name, getattr(settings, name))
    check_choice("engine", settings.engine, ENGINES)
    if settings.device is not None:
        check_device(settings.device)
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


def check_engine_arguments(task, algorithm, settings: RunSettings) -> None:
    """What an engine run is checked for besides :func:`_check_common_arguments`."""
    check_engine_task(task)
    if settings.tol is not None:
        raise ConfigError(f"tol stops a run on ||grad f||^2, which {algorithm.name}'s rounds do not compute; it "
                          "applies to the ADMM family")
    if settings.local is not None and not isinstance(settings.local, LocalWork):
        raise ConfigError(f"local must be a fc.LocalWork(...), got {type(settings.local).__name__}")
    check_argument("lr", settings.lr)
    check_argument("clients_per_round", settings.clients_per_round, high=task.num_clients)
    if not isinstance(settings.eval_train, bool):
        raise ConfigError(f"eval_train must be True or False, got {settings.eval_train!r}")
    if not settings.eval_train and task.test is None:
        raise ConfigError("eval_train=False needs a task with a test set (divergence is judged on the test loss)")


def check_admm_arguments(algorithm, settings: RunSettings) -> None:
    """The ADMM family takes none of :data:`ENGINE_ONLY` at a value other than fc.run's default."""
    for name, default in ENGINE_ONLY.items():
        value = getattr(settings, name)
        if value is not default and value != default:
            raise ConfigError(f"{name} does not apply to {algorithm.name}: the ADMM family runs every client in "
                              f"every iteration with its own local step; leave {name} at {default!r}")
