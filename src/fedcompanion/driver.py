"""The driver: one federated training run, from a task and an algorithm to a tidy history (:func:`run`).

It stands above both the engines (:mod:`fedcompanion.engine`, which minimise a local objective) and the algorithms
(:mod:`fedcompanion.algorithms`, which say what is minimised and what the server does with the uploads); neither of
those imports the other, or this module. Every run goes through one loop, :func:`run_rounds` (evaluation, divergence,
the tolerance, timing), handed its round: :func:`play_round` in-process, or the server's round on Flower
(:mod:`fedcompanion.flower.core`, whose clients run :func:`client_work`). Every algorithm, the ADMM family included,
goes through the same round functions."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from .engine import DEFAULT_ENGINE, ENGINES
from .engine.exact import train_exact
from .engine.sampling import make_sampler
from .engine.schedule import LocalWork
from .infra.machine import default_threads, torch_threads
from .infra.memory import reuse_freed_memory
from .metrics import fairness
from .protocol import (
    DIVERGENCE_FACTOR,
    History,
    LocalResult,
    RoundInfo,
    RunResult,
    State,
    Watch,
    floats,
    has_diverged,
    zero_rows,
)
from .settings import RunSettings, check_engine_task, check_run_arguments

MOMENTUM = "local_momentum"  # the client-state entry holding a carried local-optimiser momentum buffer


def client_work(task, algorithm, received, clients, info: RoundInfo, *, engine: str = DEFAULT_ENGINE, seed: int = 0,
                local: LocalWork | None = None):
    """What the active clients do in a round: local objective, probe (if asked for), local work, client update.

    ``clients`` is their part of the state (:class:`~fedcompanion.protocol.ActiveClients`); a carried momentum
    buffer is its ``local_momentum`` entry. Returns ``(their new state entries, the uploads, the local result)``.
    A Flower client runs exactly this for K = 1.
    """
    if not algorithm.solves_exactly:
        check_engine_task(task)
    train, probe = ENGINES[engine]
    local = local or LocalWork(epochs=1.0)
    carried = MOMENTUM in clients and len(info.clients) > 0
    objective = algorithm.local_objective(task, received, clients, info).replace(
        momentum=local.momentum, weight_decay=local.weight_decay,
        momentum_buffer=clients[MOMENTUM] if carried else None)
    if objective.solve is not None:  # minimised exactly (or by a declared linearised step), on any engine
        train = train_exact
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
        self.task, self.extra = task, extra_metrics or {}
        self.per_client_metrics, self.eval_train = per_client_metrics, eval_train
        self.split_sizes = task.client_sizes if task.client_test is None else task.client_test.sizes

    def evaluate(self, r: int, x: torch.Tensor, recorded: dict, compute_time: float) -> float | None:
        """Record round r's metrics of the global model x and the ``recorded`` values (the communication counts, the
        algorithm's diagnostics); returns the training loss (the test loss when the training data are not
        evaluated; ``None`` without either)."""
        task = self.task
        values = {}
        losses = accs = None
        if self.eval_train:
            losses, accs = task.evaluate_clients(x)
            w = task.weights.to(losses.dtype).to(losses.device)
            values["train_loss"] = float(w @ losses)
            if task.loss.labelled:
                values["train_accuracy"] = float(w @ accs)
        values.update(task.test_metrics(x))
        if task.client_test is not None:
            losses, accs = task.evaluate_clients(x, split=task.client_test)
        if losses is not None:
            values.update(fairness(losses, accs, self.split_sizes))
        for name, fn in self.extra.items():
            values[name] = float(fn(x))
        values.update(recorded)
        self.record(r, values, compute_time)
        if self.per_client_metrics and losses is not None:
            self.rows.extend((r, i, "client_loss", v) for i, v in enumerate(losses.tolist()))
            if task.loss.labelled:
                self.rows.extend((r, i, "client_accuracy", v) for i, v in enumerate(accs.tolist()))
        return values.get("train_loss" if self.eval_train else "test_loss")


def run_rounds(rounds: int, play: Callable[[int], Watch], evaluate: Callable[[int, float], float | None], *,
               eval_every: int = 1, evaluate_start: bool = True, divergence_factor: float | None = DIVERGENCE_FACTOR,
               tol: float | None = None, name: str = "", progress: bool = False) -> tuple[str, int | None]:
    """The one round loop: every run (in-process or Flower's server) is ``play`` handed to it.

    ``play(r)`` does round r's work (timed: the seconds are summed into the compute time) and returns a
    :class:`Watch`; ``evaluate(r, compute_time)`` records the model after r rounds (untimed) and returns the loss
    divergence is judged on, or ``None``. Evaluations: at round 0 (``evaluate_start``), every ``eval_every`` rounds,
    after the last, and at the round that stops the run, unless its model is not finite. The run stops as
    ``converged`` once a round's stationarity is below ``tol``, and as ``diverged`` once its model is not finite or
    a judged loss exceeds ``divergence_factor`` times the first one (:func:`~fedcompanion.protocol.has_diverged`;
    the first: round 0's evaluation, else the first round's own loss). Returns ``(status, diverged_round)``.
    """
    compute, initial = 0.0, None
    if evaluate_start:
        initial = evaluate(0, compute)
    bar = tqdm(range(rounds), desc=name, disable=not progress, leave=False)
    for r in bar:
        tic = time.perf_counter()
        watch = play(r)
        compute += time.perf_counter() - tic
        loss = watch.loss if watch.finite else math.nan
        initial = loss if initial is None else initial
        converged = tol is not None and watch.stationarity is not None and watch.stationarity < tol
        diverged = loss is not None and has_diverged(loss, initial, divergence_factor)
        if watch.finite and ((r + 1) % eval_every == 0 or r + 1 == rounds or converged or diverged):
            evaluated = evaluate(r + 1, compute)
            if evaluated is not None:
                bar.set_postfix(loss=f"{evaluated:.4g}", refresh=False)
                diverged = diverged or has_diverged(evaluated, initial, divergence_factor)
        if converged:
            return "converged", None
        if diverged:
            return "diverged", r + 1
    return "ok", None


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
    tol: float | None = None,
    eval_train: bool = True,
    device: str | torch.device | None = None,
    threads: int | None = None,
    progress: bool = False,
) -> RunResult:
    """Train ``algorithm`` on ``task`` for ``rounds`` communication rounds (the ADMM family: iterations).

    Args:
        clients_per_round: m; ``None`` means full participation.
        seed: fixes the initial model, the sampled clients, the local step counts and every
            mini-batch. Two runs with the same arguments give identical numbers.
        engine: ``"batched"`` (all active clients at once; the default) or ``"loop"`` (the readable reference,
            one client and one step at a time; the same numbers up to rounding); more with ``register_engine``.
        lr: the client step size eta (> 0).
        local: the local work per round (default: one epoch of mini-batches of 32, plain SGD).
        sampling: ``"uniform"``, ``"weighted"``, ``"full"``, one added with ``register_sampling``, or a callable
            ``r -> p^r`` [N].
        eval_every: evaluate every ``eval_every`` rounds (and at round 0, before training, and after the last).
        per_client_metrics: also record each client's loss and accuracy (on its held-out split if the task has
            one) at every evaluation.
        extra_metrics: name -> function of the global model, recorded at each evaluation.
        init: initial global model (default: the task's initialisation under ``seed``).
        divergence_factor: stop and report ``diverged`` once the training loss exceeds this multiple of its
            initial value (``None``: only on NaN/inf).
        tol: stop and report ``converged`` once a round's stationarity (||grad f||^2) falls below ``tol`` (for an
            algorithm whose ``watch`` reports one: the ADMM family; ``None``: run every round).
        eval_train: evaluate on every client's training data (``train_loss``, ``train_accuracy``, and the fairness
            metrics where the task has no held-out splits). ``False`` saves that pass (the one that dominates an
            evaluation) for runs that need only the test metrics (or, the ADMM family, their own records);
            divergence is then judged on the test loss (and on the algorithm's own watched loss).
        device: run on this device (``"cpu"``, ``"cuda"``); default: where the task is.
        threads: torch threads for the run, restored after it; default: one for a model of at most
            :data:`~fedcompanion.infra.machine.SMALL_PROBLEM` parameters (as every run of a sweep), else torch's
            setting.
        progress: show a progress bar.

    The ADMM family (``fc.make("ceadmm", k0=10)``, ...) runs like any other algorithm, a round being one iteration:
    it needs every client in every round (``clients_per_round=None``), minimises its local objectives exactly or by
    its own linearised step on any engine (``lr`` and ``local`` do not change it), reports f(y) and
    ||grad f(y)||^2 for divergence and ``tol``, and records its diagnostics at each evaluation (see
    :mod:`fedcompanion.algorithms.ceadmm`).

    The first run in a process asks glibc's malloc to keep freed blocks for reuse (:mod:`fedcompanion.infra.memory`;
    ``FEDCOMPANION_SYSTEM_MALLOC=1`` opts out): where memory comes from, never the numbers.

    The history records, at each evaluation, ``train_loss`` and ``train_accuracy`` (size-weighted over the
    clients' training data), ``test_loss``/``test_accuracy`` (the task's test set), the fairness metrics of
    :mod:`fedcompanion.metrics`, ``uploaded_floats``/``downloaded_floats`` (counted from the messages) and
    the extra metrics. Seconds of computation are in ``result.timing``.
    """
    settings = RunSettings(clients_per_round, seed, engine, lr, local, sampling, eval_every, per_client_metrics,
                           extra_metrics, init, divergence_factor, tol, eval_train, device, threads, progress)
    check_run_arguments(task, algorithm, rounds, settings)
    with torch_threads(threads if threads is not None else default_threads(task.num_params)):
        return _run(task if device is None else task.to(device), algorithm, rounds, settings)


def _run(task, algorithm, rounds: int, settings: RunSettings) -> RunResult:
    seed, engine, init = settings.seed, settings.engine, settings.init
    local = settings.local or LocalWork(epochs=1.0)
    schedule = Schedule(task, settings.sampling, settings.clients_per_round, local, seed, settings.lr)
    x0 = algorithm.initial_model(task, seed) if init is None else init.to(task.device, task.dtype).clone()
    state = previous = initial_state(task, algorithm, x0, local)
    recorder = Recorder(task, settings.extra_metrics, settings.per_client_metrics, settings.eval_train)
    reuse_freed_memory()
    comm = {"uploaded_floats": 0, "downloaded_floats": 0}
    start = time.perf_counter()

    def play(r: int) -> Watch:
        nonlocal state, previous
        info = schedule.info(r)
        previous = state
        state, received, uploads, _ = play_round(task, algorithm, state, info, engine=engine, seed=seed, local=local)
        comm["uploaded_floats"] += floats(uploads)
        comm["downloaded_floats"] += len(info.clients) * floats(received)
        return algorithm.watch(task, state)

    def evaluate(r: int, compute: float) -> float:
        diagnostics = algorithm.diagnostics(task, state, previous if r else None)
        return recorder.evaluate(r, state.x, {**comm, **diagnostics}, compute)

    status, diverged_round = run_rounds(
        rounds, play, evaluate, eval_every=settings.eval_every, divergence_factor=settings.divergence_factor,
        tol=settings.tol, name=algorithm.name, progress=settings.progress)
    return recorder.result(state.x, status, diverged_round, time.perf_counter() - start)
