"""``run()``: one federated training run, from a task and an algorithm to a tidy history."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..validation import ConfigError, check_choice, check_number
from .local import RoundInfo, probe_loop, train_loop
from .sampling import make_sampler
from .schedule import LocalWork

GLOBAL = -1  # the ``client`` value of rows that describe the global model, not one client

ENGINES = {"loop": (train_loop, probe_loop)}


def register_engine(name: str, train, probe) -> None:
    """Add an engine: ``train(task, objective, clients, seed=, round=, batch_size=)`` and ``probe``."""
    ENGINES[name] = (train, probe)


@dataclass
class RunResult:
    """What a run produced.

    Attributes:
        history: tidy frame with columns ``round, client, metric, value`` (client = -1: global).
        params: the final global model x_0, flat [P].
        status: ``"ok"`` or ``"diverged"``.
        diverged_round: the first round whose model or loss was NaN/inf (else ``None``).
        wall_time: seconds, evaluation included.
    """

    history: pd.DataFrame
    params: torch.Tensor
    status: str
    diverged_round: int | None
    wall_time: float

    def metric(self, name: str, client: int = GLOBAL) -> pd.Series:
        """One metric against the round, e.g. ``result.metric('test_accuracy')``."""
        h = self.history
        rows = h[(h.metric == name) & (h.client == client)]
        return rows.set_index("round")["value"]


def run(
    task,
    algorithm,
    rounds: int,
    clients_per_round: int | None = None,
    seed: int = 0,
    engine: str = "loop",
    *,
    lr: float = 0.05,
    local: LocalWork | None = None,
    sampling: str | Callable = "uniform",
    eval_every: int = 1,
    per_client_metrics: bool = True,
    extra_metrics: dict[str, Callable[[torch.Tensor], float]] | None = None,
    init: torch.Tensor | None = None,
    progress: bool = False,
) -> RunResult:
    """Train ``algorithm`` on ``task`` for ``rounds`` communication rounds.

    Args:
        clients_per_round: m; ``None`` means full participation.
        seed: fixes the initial model, the sampled clients, the local step counts and every
            mini-batch. Two runs with the same arguments give identical numbers.
        engine: ``"loop"`` (the readable reference) or ``"batched"`` (all clients at once, same numbers);
            more can be added with ``register_engine``.
        lr: the client step size eta (> 0).
        local: the local work per round (default: one epoch of mini-batches of 32).
        sampling: ``"uniform"``, ``"weighted"``, ``"full"``, or a callable ``r -> p^r`` [N].
        eval_every: evaluate every ``eval_every`` rounds (and at round 0, before training, and after the last).
        extra_metrics: name -> function of the global model, recorded at each evaluation.
        init: initial global model (default: the model's initialisation under ``seed``).
    """
    if not hasattr(algorithm, "local_objective"):
        raise ConfigError(
            f"{algorithm.name} runs full-batch with its own solver: use "
            f"fc.make({algorithm.name!r}, ...).solve(task, iterations) instead of fc.run"
        )
    check_number("rounds", rounds, low=1, integer=True)
    check_number("lr", lr, low=0.0, low_open=True)
    check_number("seed", seed, low=0, integer=True)
    check_number("eval_every", eval_every, low=1, integer=True)
    check_choice("engine", engine, ENGINES)
    train, probe = ENGINES[engine]
    local = local or LocalWork(epochs=1.0)
    n = task.num_clients
    sampler = make_sampler(sampling, n, clients_per_round, task.weights.numpy())
    sample_rng = np.random.default_rng([seed, 1])
    steps_rng = np.random.default_rng([seed, 2])
    sizes = task.client_sizes.numpy()
    x0 = task.init_params(seed) if init is None else init.to(task.dtype).clone()
    state = algorithm.init(task, x0)
    p = task.num_params
    rows: list[tuple] = []
    comm = {"uploaded_floats": 0, "downloaded_floats": 0}
    status, diverged_round, compute_time = "ok", None, 0.0
    start = time.perf_counter()

    def evaluate(r: int) -> bool:
        losses, accs = task.per_client(state.x)
        w = task.weights.to(losses.dtype)
        values = {"train_loss": float(w @ losses), "train_accuracy": float(w @ accs)}
        values.update(task.test_metrics(state.x))
        for name, fn in (extra_metrics or {}).items():
            values[name] = float(fn(state.x))
        values.update(comm, compute_time=compute_time)
        rows.extend((r, GLOBAL, k, v) for k, v in values.items())
        if per_client_metrics:
            for i in range(n):
                rows.append((r, i, "client_loss", float(losses[i])))
                rows.append((r, i, "client_accuracy", float(accs[i])))
        return math.isfinite(values["train_loss"])

    evaluate(0)
    bar = tqdm(range(rounds), desc=algorithm.name, disable=not progress, leave=False)
    for r in bar:
        tic = time.perf_counter()
        active, probs = sampler.sample(r, sample_rng)
        steps = local.steps_for(r, sizes, steps_rng)
        clients = torch.as_tensor(active, dtype=torch.long)
        info = RoundInfo(r, clients, torch.as_tensor(probs, dtype=task.dtype),
                         torch.as_tensor(steps[active]), lr, task.weights.to(task.dtype))
        objective = algorithm.local_objective(state, info)
        probed = probe(task, state.x, clients) if algorithm.needs_probe else None
        x_local = train(task, objective, clients, seed=seed, round=r, batch_size=local.batch_size)
        state = algorithm.aggregate(state, info, x_local, probed)
        k = len(active)
        comm["uploaded_floats"] += k * (algorithm.upload_vectors * p + algorithm.upload_scalars)
        comm["downloaded_floats"] += k * algorithm.download_vectors * p
        compute_time += time.perf_counter() - tic
        finite = bool(torch.isfinite(state.x).all())
        if finite and ((r + 1) % eval_every == 0 or r + 1 == rounds):
            finite = evaluate(r + 1)
        if not finite:
            status, diverged_round = "diverged", r + 1
            break
    history = pd.DataFrame(rows, columns=["round", "client", "metric", "value"])
    return RunResult(history, state.x, status, diverged_round, time.perf_counter() - start)
