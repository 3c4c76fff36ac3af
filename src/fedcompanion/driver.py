"""The driver: one federated training run, from a task and an algorithm to a tidy history (:func:`run`).

It stands above both the engines (:mod:`fedcompanion.engine`, which minimise a local objective) and the algorithms
(:mod:`fedcompanion.algorithms`, which say what is minimised and what the server does with the uploads); neither of
those imports the other, or this module. A round is :func:`play_round`; a Flower client runs :func:`client_work`."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from .algorithms.base import is_engine_algorithm
from .engine import DEFAULT_ENGINE, ENGINES
from .engine.sampling import make_sampler
from .engine.schedule import LocalWork
from .memory import reuse_freed_memory
from .metrics import fairness
from .protocol import (
    DIVERGENCE_FACTOR,
    History,
    LocalResult,
    RoundInfo,
    RunResult,
    State,
    floats,
    has_diverged,
    zero_rows,
)
from .tasks import Task
from .validation import ConfigError, check_choice, check_device, check_number


def _check_engine_task(task) -> None:
    """The engines train the data term and the l2 term; a task with the non-convex regulariser is refused."""
    if not isinstance(task, Task):
        raise ConfigError(f"task must be a fedcompanion Task (see fc.tasks), got {type(task).__name__}")
    if task.nonconvex:
        raise ConfigError(f"task {task.name!r} has nonconvex={task.nonconvex}: the engines do not train the "
                          "non-convex regulariser; the ADMM family's solve(task, iterations) does")


def _check_run_arguments(task, algorithm, local, init, extra_metrics):
    _check_engine_task(task)
    if isinstance(algorithm, str):
        raise ConfigError(f"algorithm must be an algorithm object, e.g. fc.make({algorithm!r}), not a str")
    if not is_engine_algorithm(algorithm):
        name = getattr(algorithm, "name", type(algorithm).__name__)
        if hasattr(algorithm, "solve"):
            raise ConfigError(f"{name} runs full-batch with its own solver: use "
                              f"fc.make({name!r}, ...).solve(task, iterations) instead of fc.run")
        raise ConfigError(f"algorithm must be made by fc.make(...), got {type(algorithm).__name__}")
    if local is not None and not isinstance(local, LocalWork):
        raise ConfigError(f"local must be a fc.LocalWork(...), got {type(local).__name__}")
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


MOMENTUM = "local_momentum"  # the client-state entry holding a carried local-optimiser momentum buffer


def client_work(task, algorithm, received, clients, info: RoundInfo, *, engine: str = DEFAULT_ENGINE, seed: int = 0,
                local: LocalWork | None = None):
    """What the active clients do in a round: local objective, probe (if asked for), local work, client update.

    ``clients`` is their part of the state (:class:`~fedcompanion.protocol.ActiveClients`); a carried momentum
    buffer is its ``local_momentum`` entry. Returns ``(their new state entries, the uploads, the local result)``.
    A Flower client runs exactly this for K = 1.
    """
    _check_engine_task(task)
    train, probe = ENGINES[engine]
    local = local or LocalWork(epochs=1.0)
    carried = MOMENTUM in clients and len(info.clients) > 0
    objective = algorithm.local_objective(task, received, clients, info).replace(
        momentum=local.momentum, weight_decay=local.weight_decay,
        momentum_buffer=clients[MOMENTUM] if carried else None)
    probed = None
    if algorithm.needs_probe:
        probed = probe(task, received["x"], info.clients, algorithm.probe_samples, seed, info.round,
                       gradient=algorithm.probe_gradient)
    x_local, buffers = train(task, objective, info.clients, seed=seed, round=info.round, batch_size=local.batch_size)
    result = LocalResult(x_local, objective, probed, buffers)
    new_clients, uploads = algorithm.client_update(task, received, clients, info, result)
    if carried:
        new_clients = {**new_clients, MOMENTUM: buffers}
    return new_clients, uploads, result


class Round(NamedTuple):
    """What :func:`play_round` returns, by name (or unpacked as a tuple, in this order)."""

    state: State  # the new state
    received: dict  # what the server broadcast
    uploads: dict  # what the active clients uploaded
    local: LocalResult  # the active clients' local work (``local.x``: their final models)


def play_round(task, algorithm, state: State, info: RoundInfo, *, engine: str = DEFAULT_ENGINE, seed: int = 0,
               local: LocalWork | None = None) -> Round:
    """One round: broadcast, the active clients' work (:func:`client_work`), the server update."""
    received = algorithm.broadcast(state)
    new_clients, uploads, result = client_work(task, algorithm, received, state.active(info.clients), info,
                                               engine=engine, seed=seed, local=local)
    server = algorithm.server_update(state.server, info, uploads)
    return Round(state.updated(server, info.clients, new_clients), received, uploads, result)


def initial_state(task, algorithm, x0: torch.Tensor, local: LocalWork) -> State:
    """``algorithm.init`` plus, when the local optimiser carries its momentum across rounds, a zero buffer
    per client in the client state."""
    state = algorithm.init(task, x0)
    if local.momentum and not local.momentum_reset:
        state = State(state.server, {**state.clients, MOMENTUM: zero_rows(task.num_clients, x0)})
    return state


class Schedule:
    """Who works in round r and how much: the sampled clients, their inclusion probabilities and local step
    counts, from the run's own seeded streams (the same for every algorithm, engine and Flower)."""

    def __init__(self, task, sampling, clients_per_round, local: LocalWork, seed: int, lr: float):
        self.task, self.local, self.lr = task, local, lr
        self.sampler = make_sampler(sampling, task.num_clients, clients_per_round, task.weights.numpy())
        self.sample_rng = np.random.default_rng([seed, 1])
        self.steps_rng = np.random.default_rng([seed, 2])
        self.sizes = task.client_sizes.numpy()

    def info(self, r: int) -> RoundInfo:
        """Round r's RoundInfo (call once per round, in order: the streams advance)."""
        active, probs = self.sampler.sample(r, self.sample_rng)
        steps = self.local.steps_for(r, self.sizes, self.steps_rng)
        dtype = self.task.dtype
        device = self.task.device  # what the server's arithmetic touches lives with the task's data
        return RoundInfo(r, torch.as_tensor(active, dtype=torch.long),
                         torch.as_tensor(probs, dtype=dtype, device=device), torch.as_tensor(steps[active]), self.lr,
                         self.task.weights.to(device, dtype))


class Recorder(History):
    """The evaluations of a run (see :func:`run` for the metrics), recorded as its :class:`History`."""

    def __init__(self, task, extra_metrics: dict | None = None, per_client_metrics: bool = True,
                 eval_train: bool = True):
        super().__init__()
        self.task, self.extra, self.per_client, self.eval_train = task, extra_metrics or {}, per_client_metrics, \
            eval_train
        self.split_sizes = task.client_sizes if task.client_test is None else task.client_test.sizes

    def evaluate(self, r: int, x: torch.Tensor, communication: dict, compute_time: float) -> float:
        """Record round r's metrics of the global model x; returns the training loss (the test loss when the
        training data are not evaluated)."""
        task = self.task
        values = {}
        losses = accs = None
        if self.eval_train:
            losses, accs = task.per_client(x)
            w = task.weights.to(losses.dtype).to(losses.device)
            values["train_loss"] = float(w @ losses)
            if task.loss.labelled:
                values["train_accuracy"] = float(w @ accs)
        values.update(task.test_metrics(x))
        if task.client_test is not None:
            losses, accs = task.per_client(x, split=task.client_test)
        if losses is not None:
            values.update(fairness(losses, accs, self.split_sizes))
        for name, fn in self.extra.items():
            values[name] = float(fn(x))
        values.update(communication)
        self.record(r, values, compute_time)
        if self.per_client and losses is not None:
            self.rows.extend((r, i, "client_loss", v) for i, v in enumerate(losses.tolist()))
            if task.loss.labelled:
                self.rows.extend((r, i, "client_accuracy", v) for i, v in enumerate(accs.tolist()))
        return values["train_loss" if self.eval_train else "test_loss"]


def run(
    task,
    algorithm,
    rounds: int,
    clients_per_round: int | None = None,
    seed: int = 0,
    engine: str = DEFAULT_ENGINE,
    *,
    lr: float = 0.05,
    local: LocalWork | None = None,
    sampling: str | Callable = "uniform",
    eval_every: int = 1,
    per_client_metrics: bool = True,
    extra_metrics: dict[str, Callable[[torch.Tensor], float]] | None = None,
    init: torch.Tensor | None = None,
    divergence_factor: float | None = DIVERGENCE_FACTOR,
    eval_train: bool = True,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> RunResult:
    """Train ``algorithm`` on ``task`` for ``rounds`` communication rounds.

    Args:
        clients_per_round: m; ``None`` means full participation.
        seed: fixes the initial model, the sampled clients, the local step counts and every
            mini-batch. Two runs with the same arguments give identical numbers.
        engine: ``"batched"`` (all active clients at once; the default) or ``"loop"`` (the readable reference,
            one client and one step at a time; the same numbers up to rounding); more with ``register_engine``.
        lr: the client step size eta (> 0).
        local: the local work per round (default: one epoch of mini-batches of 32, plain SGD).
        sampling: ``"uniform"``, ``"weighted"``, ``"full"``, or a callable ``r -> p^r`` [N].
        eval_every: evaluate every ``eval_every`` rounds (and at round 0, before training, and after the last).
        per_client_metrics: also record each client's loss and accuracy (on its held-out split if the task has
            one) at every evaluation.
        extra_metrics: name -> function of the global model, recorded at each evaluation.
        init: initial global model (default: the task's initialisation under ``seed``).
        divergence_factor: stop and report ``diverged`` once the training loss exceeds this multiple of its
            initial value (``None``: only on NaN/inf).
        eval_train: evaluate on every client's training data (``train_loss``, ``train_accuracy``, and the fairness
            metrics where the task has no held-out splits). ``False`` saves that pass (the one that dominates an
            evaluation) for runs that need only the test metrics; divergence is then judged on the test loss.
        device: run on this device (``"cpu"``, ``"cuda"``); default: where the task is.
        progress: show a progress bar.

    The first run in a process asks glibc's malloc to keep freed blocks for reuse (:mod:`fedcompanion.memory`;
    ``FEDCOMPANION_SYSTEM_MALLOC=1`` opts out): where memory comes from, never the numbers.

    The history records, at each evaluation, ``train_loss`` and ``train_accuracy`` (size-weighted over the
    clients' training data), ``test_loss``/``test_accuracy`` (the task's test set), the fairness metrics of
    :mod:`fedcompanion.metrics`, ``uploaded_floats``/``downloaded_floats`` (counted from the messages) and
    the extra metrics. Seconds of computation are in ``result.timing``.
    """
    _check_run_arguments(task, algorithm, local, init, extra_metrics)
    check_number("rounds", rounds, low=1, integer=True)
    check_number("lr", lr, low=0.0, low_open=True)
    if not math.isfinite(lr):
        raise ConfigError(f"lr must be finite, got {lr}")
    check_number("seed", seed, low=0, integer=True)
    check_number("eval_every", eval_every, low=1, integer=True)
    if divergence_factor is not None:
        check_number("divergence_factor", divergence_factor, low=1.0)
    check_choice("engine", engine, ENGINES)
    if device is not None:
        check_device(device)
    task = task if device is None else task.to(device)
    local = local or LocalWork(epochs=1.0)
    schedule = Schedule(task, sampling, clients_per_round, local, seed, lr)
    x0 = task.init_params(seed) if init is None else init.to(task.device, task.dtype).clone()
    state = initial_state(task, algorithm, x0, local)
    if not isinstance(eval_train, bool):
        raise ConfigError(f"eval_train must be True or False, got {eval_train!r}")
    if not eval_train and task.test is None:
        raise ConfigError("eval_train=False needs a task with a test set (divergence is judged on the test loss)")
    recorder = Recorder(task, extra_metrics, per_client_metrics, eval_train)
    reuse_freed_memory()
    comm = {"uploaded_floats": 0, "downloaded_floats": 0}
    status, diverged_round, compute_time = "ok", None, 0.0
    start = time.perf_counter()
    initial_loss = recorder.evaluate(0, state.x, comm, compute_time)
    bar = tqdm(range(rounds), desc=algorithm.name, disable=not progress, leave=False)
    for r in bar:
        tic = time.perf_counter()
        info = schedule.info(r)
        state, received, uploads, _ = play_round(task, algorithm, state, info, engine=engine, seed=seed, local=local)
        comm["uploaded_floats"] += floats(uploads)
        comm["downloaded_floats"] += len(info.clients) * floats(received)
        compute_time += time.perf_counter() - tic
        loss = 0.0 if bool(torch.isfinite(state.x).all()) else math.nan
        if not math.isnan(loss) and ((r + 1) % eval_every == 0 or r + 1 == rounds):
            loss = recorder.evaluate(r + 1, state.x, comm, compute_time)
            bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
        if has_diverged(loss, initial_loss, divergence_factor):
            status, diverged_round = "diverged", r + 1
            break
    return recorder.result(state.x, status, diverged_round, time.perf_counter() - start)
