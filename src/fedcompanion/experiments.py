"""Experiment configs, their hash, the on-disk results cache, and parallel sweeps.

A config is plain data; its SHA-256 (of the canonical JSON, ``label`` excluded) names its results:
``results/<hash>.csv`` (the tidy history), ``results/<hash>.pt`` (the final global model, a tensor
saved with ``torch.save``; load it with ``weights_only=True``) and ``results/<hash>.json`` (config,
status, timing), each written atomically, the JSON last. A sweep reads hits and runs misses in parallel processes, so
an interrupted ``make reproduce`` resumes where it stopped.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import multiprocessing
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from . import tasks as _tasks
from .algorithms import make
from .engine import LocalWork, run
from .engine.run import ENGINES
from .validation import ConfigError, check_choice, check_number

TASKS = {
    "dataset": _tasks.federated_dataset_task,
    "least_squares": _tasks.least_squares_task,
    "synthetic": _tasks.synthetic_task,
    "qsar": _tasks.qsar_logistic_task,
}


@dataclass
class ExperimentConfig:
    """One run, as data.

    Attributes:
        task: builder name (``dataset``, ``least_squares``, ``synthetic``, ``qsar``).
        task_args: keyword arguments of the builder (``seed`` is taken from ``seed``).
        algorithm, hyperparameters: ``fedcompanion.make(algorithm, **hyperparameters)``.
        local: keyword arguments of :class:`~fedcompanion.engine.LocalWork`.
        track_optimum: record ``suboptimality`` F(x) - F* and ``distance_to_optimum`` (convex tasks).
        engine: ``batched`` (default: fast) or ``loop`` (the readable reference; same numbers).
        label: a display name; not part of the hash.
    """

    task: str = "dataset"
    task_args: dict = field(default_factory=dict)
    algorithm: str = "fedavg"
    hyperparameters: dict = field(default_factory=dict)
    rounds: int = 50
    clients_per_round: int | None = 10
    lr: float = 0.05
    local: dict = field(default_factory=lambda: {"epochs": 1.0, "batch_size": 32})
    sampling: str = "uniform"
    eval_every: int = 1
    per_client_metrics: bool = True
    track_optimum: bool = False
    seed: int = 0
    engine: str = "batched"
    label: str = ""

    def key(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("label")
        return d

    def hash(self) -> str:
        blob = json.dumps(self.key(), sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def validate(self) -> ExperimentConfig:
        """Fail now, naming the parameter, rather than in a worker process later."""
        check_choice("task", self.task, TASKS)
        make(self.algorithm, **self.hyperparameters)
        LocalWork(**self.local)
        check_number("rounds", self.rounds, low=1, integer=True)
        check_number("lr", self.lr, low=0.0, low_open=True)
        check_number("seed", self.seed, low=0, integer=True)
        check_choice("engine", self.engine, ENGINES)
        if self.clients_per_round is not None:
            check_number("clients_per_round", self.clients_per_round, low=1, integer=True)
        return self


@functools.lru_cache(maxsize=8)
def _build_task(name: str, args_json: str, seed: int):
    return TASKS[name](seed=seed, **json.loads(args_json))


def build_task(config: ExperimentConfig):
    """The config's task (cached per process, so a sweep over algorithms builds it once)."""
    args = dict(config.task_args)
    if "hidden" in args:
        args["hidden"] = tuple(args["hidden"])
    return _build_task(config.task, json.dumps(args, sort_keys=True), config.seed)


def run_config(config: ExperimentConfig, progress: bool = False):
    """Run one config and return the :class:`~fedcompanion.engine.RunResult`."""
    config.validate()
    task = build_task(config)
    if config.clients_per_round is not None and config.clients_per_round > task.num_clients:
        raise ConfigError(
            f"clients_per_round must be between 1 and num_clients={task.num_clients}, "
            f"got {config.clients_per_round}"
        )
    extra = {}
    if config.track_optimum:
        x_star, f_star = task.optimum
        extra = {
            "suboptimality": lambda x: task.global_loss(x) - f_star,
            "distance_to_optimum": lambda x: float((x - x_star).norm() / x_star.norm()),
        }
    return run(
        task, make(config.algorithm, **config.hyperparameters), config.rounds,
        config.clients_per_round, config.seed, config.engine, lr=config.lr,
        local=LocalWork(**config.local), sampling=config.sampling, eval_every=config.eval_every,
        per_client_metrics=config.per_client_metrics, extra_metrics=extra, progress=progress,
    )  # fmt: skip


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; results are meant to be shared
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _run_and_store(config: ExperimentConfig, results_dir: str, threads: int) -> str:
    torch.set_num_threads(threads)
    result = run_config(config)
    folder = Path(results_dir)
    h = config.hash()
    _atomic_write(folder / f"{h}.csv", lambda p: result.history.to_csv(p, index=False))
    _atomic_write(folder / f"{h}.pt", lambda p: torch.save(result.params, p))
    meta = {
        "config": config.key(), "status": result.status,
        "diverged_round": result.diverged_round, "wall_time": result.wall_time,
    }  # fmt: skip
    _atomic_write(folder / f"{h}.json", lambda p: Path(p).write_text(json.dumps(meta, indent=1)))
    return h


def is_cached(config: ExperimentConfig, results_dir: str | Path) -> bool:
    folder = Path(results_dir)
    return all((folder / f"{config.hash()}.{ext}").exists() for ext in ("json", "csv", "pt"))


def load_result(config: ExperimentConfig, results_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """(history, metadata) of a cached run."""
    folder = Path(results_dir)
    h = config.hash()
    return pd.read_csv(folder / f"{h}.csv"), json.loads((folder / f"{h}.json").read_text())


def load_params(config: ExperimentConfig, results_dir: str | Path) -> torch.Tensor:
    """The final global model of a cached run."""
    return torch.load(Path(results_dir) / f"{config.hash()}.pt", weights_only=True)


def sweep(
    configs: list[ExperimentConfig],
    results_dir: str | Path = "results",
    jobs: int | None = None,
    refresh: bool = False,
    progress: bool = True,
) -> pd.DataFrame:
    """Run every config not yet in ``results_dir`` (all of them if ``refresh``) and return one frame.

    Columns: ``label, algorithm, seed, hash, status, round, client, metric, value``. A run that
    diverges is stored with status ``diverged`` and the sweep goes on. ``jobs`` processes (default:
    the CPU count) share the machine; each uses ``cpus // jobs`` torch threads.
    """
    configs = [c.validate() for c in configs]
    folder = Path(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    todo = list({c.hash(): c for c in configs if refresh or not is_cached(c, folder)}.values())
    cpus = os.cpu_count() or 1
    jobs = max(1, min(jobs or cpus, len(todo) or 1))
    bar = tqdm(total=len(configs), desc="runs", disable=not progress)
    bar.update(len(configs) - len(todo))
    if jobs == 1:
        for c in todo:
            _run_and_store(c, str(folder), torch.get_num_threads())
            bar.update()
    elif todo:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            futures = [pool.submit(_run_and_store, c, str(folder), max(1, cpus // jobs)) for c in todo]
            for f in as_completed(futures):
                f.result()
                bar.update()
    bar.close()
    frames = []
    for c in configs:
        history, meta = load_result(c, folder)
        frames.append(history.assign(
            label=c.label or c.algorithm, algorithm=c.algorithm, seed=c.seed, hash=c.hash(),
            status=meta["status"],
        ))  # fmt: skip
    columns = ["label", "algorithm", "seed", "hash", "status", "round", "client", "metric", "value"]
    return pd.concat(frames, ignore_index=True)[columns]


def summarize(frame: pd.DataFrame, metric: str, **where: Any) -> pd.DataFrame:
    """The global ``metric`` at the last evaluated round of each run, as label x seed."""
    rows = frame[(frame.metric == metric) & (frame.client == -1)]
    for k, v in where.items():
        rows = rows[rows[k] == v]
    last = rows.sort_values("round").groupby(["label", "seed"]).tail(1)
    return last.pivot(index="label", columns="seed", values="value")
