"""Experiment configs, the on-disk results cache, and parallel sweeps: the one pipeline every figure uses.

A config (:class:`ExperimentConfig`) is plain data describing one run of any registered algorithm:
an engine algorithm (``fc.run``), an ADMM-family solver (``solve``) or the two-block extension. Its key
is the canonical JSON of the config (``label`` excluded) plus a fingerprint of the package's numerical
source code, so a code change never serves results that older code computed. The key's SHA-256 names the
run's files in the results folder:

* ``<hash>.csv.gz``: the tidy history (``round, client, metric, value``);
* ``<hash>.pt``: the final global model, only with ``save_params=True`` (``torch.save``; load it with
  ``weights_only=True``);
* ``<hash>.json``: config, status, timings, the machine's numerical platform
  (:func:`~fedcompanion.machine.numerical_platform`), and the SHA-256 and size of the other two, written last.

Every file is written atomically (temp file, then rename). Loading verifies the JSON, the digests, the row
count and the tensor shape; any mismatch warns, naming the file, and the run is recomputed. Every run in a
sweep uses ``RUN_THREADS`` torch threads whatever ``jobs`` is, so a run's numbers depend only on its config
and seed: not on ``jobs``, on the order of the sweep, or on what was cached before (on another CPU, or with
another torch or BLAS, the last bits differ: hence the recorded platform).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import io
import json
import multiprocessing
import os
import tempfile
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from . import tasks as _tasks
from .algorithms import make
from .algorithms.base import is_engine_algorithm
from .data.partition import PARTITIONS
from .engine import LocalWork, run
from .engine.run import ENGINES
from .engine.sampling import SAMPLINGS
from .machine import numerical_platform
from .protocol import DIVERGENCE_FACTOR, RunResult
from .validation import ConfigError, check_choice, check_device, check_number

RUN_THREADS = 1  # torch threads per run in a sweep: fixed, so that float32 results never depend on ``jobs``

TASKS = {
    "dataset": _tasks.federated_dataset_task,
    "least_squares": _tasks.least_squares_task,
    "synthetic": _tasks.synthetic_task,
    "qsar": _tasks.qsar_logistic_task,
    "clustering": _tasks.clustering_task,
}
PARTITIONED_TASKS = ("dataset", "clustering")  # their builders take the partitioner's keywords

# the modules whose code decides the numbers of a run (everything but plotting, notebooks, reports, CLI)
NUMERICAL_SOURCES = ("algorithms", "data", "engine", "experiments.py", "losses.py", "metrics.py", "models.py",
                     "protocol.py", "tasks.py")


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 (first 12 hex digits) of the package's numerical source files."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for entry in NUMERICAL_SOURCES:
        path = root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            digest.update(f.relative_to(root).as_posix().encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:12]


# ------------------------------------------------------------------------------------------ metrics by name
def _convex_metric(name):
    def build(task, config):
        x_star, f_star = task.optimum
        if name == "suboptimality":
            return lambda x: task.global_loss(x) - f_star
        return lambda x: float((x - x_star).norm() / x_star.norm())
    return build


def _clustering_objective(task, config):
    from .algorithms.two_block import clustering_objective

    tau = config.hyperparameters.get("tau", 1.0)
    return lambda x: clustering_objective(task, x, tau)


def _clustering_accuracy(task, config):
    if task.labels is None or task.test is None:
        raise ConfigError("clustering_accuracy needs a clustering task (with labels and test data)")
    num_clusters = task.model.mu.shape[0]

    def accuracy(x):  # each centroid takes the majority label of the training points nearest to it
        mu = x.view(num_clusters, -1)
        nearest = torch.cdist(task.x_all, mu).argmin(1)
        label_of = torch.tensor([int(torch.mode(task.labels[nearest == c]).values) if (nearest == c).any() else -1
                                 for c in range(num_clusters)])
        return float((label_of[torch.cdist(task.test.x, mu).argmin(1)] == task.test.y).double().mean())
    return accuracy


METRICS = {
    "suboptimality": _convex_metric("suboptimality"),
    "distance_to_optimum": _convex_metric("distance_to_optimum"),
    "clustering_objective": _clustering_objective,
    "clustering_accuracy": _clustering_accuracy,
}


# ------------------------------------------------------------------------------------------ the config
@dataclass
class ExperimentConfig:
    """One run, as data.

    Attributes:
        task: builder name (``dataset``, ``least_squares``, ``synthetic``, ``qsar``, ``clustering``).
        task_args: keyword arguments of the builder (its ``seed`` is the config's ``seed``).
        algorithm, hyperparameters: ``fedcompanion.make(algorithm, **hyperparameters)``.
        rounds: communication rounds (iterations for the ADMM family).
        clients_per_round, lr, local, sampling, engine: as in :func:`fedcompanion.run` (``local`` holds the
            keyword arguments of :class:`~fedcompanion.engine.LocalWork`); ignored by the ADMM family.
        eval_every: evaluate every so many rounds (the ADMM family: record every so many iterations).
        per_client_metrics: record each client's loss and accuracy at each evaluation.
        eval_train: evaluate on the clients' training data (see :func:`fedcompanion.run`).
        metrics: extra metrics by name (see ``METRICS``): ``suboptimality``, ``distance_to_optimum``,
            ``clustering_objective``, ``clustering_accuracy``.
        tol: the ADMM family's stopping tolerance on ||grad f(y)||^2 (``None``: run all iterations).
        divergence_factor: a run whose loss exceeds this multiple of its initial one stops as diverged.
        save_params: also store the final model (``load_params``).
        device: ``cpu`` or ``cuda``.
        label: a display name; not part of the key.
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
    eval_train: bool = True
    metrics: list = field(default_factory=list)
    tol: float | None = None
    divergence_factor: float | None = DIVERGENCE_FACTOR
    seed: int = 0
    engine: str = "batched"
    save_params: bool = False
    device: str = "cpu"
    label: str = ""

    @property
    def is_engine_run(self) -> bool:
        return is_engine_algorithm(make(self.algorithm, **self.hyperparameters))

    def key(self) -> dict:
        """What names the run's results: the config (no label; for the ADMM family, no engine-only fields)
        and the code fingerprint."""
        d = dataclasses.asdict(self)
        d.pop("label")
        if not self.is_engine_run:
            for name in ("clients_per_round", "lr", "local", "sampling", "engine"):
                d.pop(name)
        d["code"] = code_fingerprint()
        return d

    def hash(self) -> str:
        blob = json.dumps(self.key(), sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def validate(self) -> ExperimentConfig:
        """Fail now, naming the parameter, rather than in a worker process later."""
        for name, kind in (("task_args", dict), ("hyperparameters", dict), ("local", dict), ("metrics", list)):
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        check_choice("task", self.task, TASKS)
        self._check_task_args()
        algorithm = make(self.algorithm, **self.hyperparameters)
        check_number("rounds", self.rounds, low=1, integer=True)
        check_number("eval_every", self.eval_every, low=1, integer=True)
        check_number("seed", self.seed, low=0, integer=True)
        if self.divergence_factor is not None:
            check_number("divergence_factor", self.divergence_factor, low=1.0)
        for name in ("per_client_metrics", "save_params", "eval_train"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for metric in self.metrics:
            check_choice("metric", metric, METRICS)
        if not isinstance(self.device, str):
            raise ConfigError(f"device must be a str such as 'cpu' or 'cuda', got {self.device!r}")
        check_device(self.device)
        if is_engine_algorithm(algorithm):
            fields = [f.name for f in dataclasses.fields(LocalWork)]
            unknown = sorted(set(self.local) - set(fields))
            if unknown:
                raise ConfigError(f"local has no field {unknown}; LocalWork's fields are {fields}")
            LocalWork(**self.local)
            check_number("lr", self.lr, low=0.0, low_open=True)
            check_choice("engine", self.engine, ENGINES)
            check_choice("sampling", self.sampling, SAMPLINGS)
            if self.clients_per_round is not None:
                check_number("clients_per_round", self.clients_per_round, low=1, integer=True)
            if self.tol is not None:
                raise ConfigError(f"tol applies to the ADMM family only, not to {self.algorithm}")
        else:
            if self.task not in ("least_squares", "qsar"):
                raise ConfigError(f"{self.algorithm} solves convex tasks only (least_squares, qsar), got {self.task!r}")
            if self.tol is not None:
                check_number("tol", self.tol, low=0.0, low_open=True)
        return self

    def _check_task_args(self) -> None:
        builder = TASKS[self.task]
        fixed = ("seed", "partition_kwargs", "dtype", "device")  # the config's own, or not expressible in JSON
        allowed = [p for p in inspect.signature(builder).parameters if p not in fixed]
        partition_keys = sorted({k for keys in PARTITIONS.values() for k in keys})
        extra = partition_keys if self.task in PARTITIONED_TASKS else []
        unknown = sorted(set(self.task_args) - set(allowed) - set(extra))
        if unknown:
            raise ConfigError(f"task {self.task!r} has no argument {unknown}; its arguments are {allowed + extra}")
        if self.task in PARTITIONED_TASKS:
            scheme = self.task_args.get("partition_scheme", inspect.signature(builder).parameters[
                "partition_scheme"].default)
            check_choice("partition_scheme", scheme, PARTITIONS)
            wrong = sorted(set(self.task_args) & set(partition_keys) - set(PARTITIONS[scheme]))
            if wrong:
                raise ConfigError(f"the {scheme!r} partition has no parameter {wrong}; "
                                  f"its parameters are {list(PARTITIONS[scheme])}")


def config_columns(config: ExperimentConfig) -> dict[str, Any]:
    """The config as flat columns for results tables: fields, and each hyperparameter under its own name."""
    columns = {"label": config.label or config.algorithm, "task": config.task, "algorithm": config.algorithm,
               "seed": config.seed, "lr": config.lr, "clients_per_round": config.clients_per_round,
               "rounds": config.rounds}
    for name, value in sorted(config.hyperparameters.items()):
        column = name if name not in columns else f"hp_{name}"
        columns[column] = value if isinstance(value, (int, float, str, bool, type(None))) else json.dumps(value)
    return columns


# ------------------------------------------------------------------------------------------ running one config
@functools.lru_cache(maxsize=4)
def _build_task(name: str, args_json: str, seed: int):
    return TASKS[name](seed=seed, **json.loads(args_json))


def build_task(config: ExperimentConfig):
    """The config's task (cached per process; tasks are never changed by a run, so sharing one is safe)."""
    args = dict(config.task_args)
    if "hidden" in args:
        args["hidden"] = tuple(args["hidden"])
    return _build_task(config.task, json.dumps(args, sort_keys=True), config.seed)


def run_config(config: ExperimentConfig, progress: bool = False) -> RunResult:
    """Run one config (with whatever torch threads are set) and return the :class:`~fedcompanion.RunResult`."""
    config.validate()
    task = build_task(config).to(config.device)
    algorithm = make(config.algorithm, **config.hyperparameters)
    extra = {name: METRICS[name](task, config) for name in config.metrics}
    if not is_engine_algorithm(algorithm):
        result = algorithm.solve(task, config.rounds, tol=config.tol, record_every=config.eval_every,
                                 divergence_factor=config.divergence_factor, progress=progress)
        if extra:  # evaluated at the final point only: the solver's own metrics cover every iteration
            last = result.rounds_run
            rows = pd.DataFrame([(last, -1, name, float(fn(result.params))) for name, fn in extra.items()],
                                columns=result.history.columns)
            result.history = pd.concat([result.history, rows], ignore_index=True)
        return result
    if config.clients_per_round is not None and config.clients_per_round > task.num_clients:
        raise ConfigError(f"clients_per_round must be between 1 and num_clients={task.num_clients}, "
                          f"got {config.clients_per_round}")
    return run(task, algorithm, config.rounds, config.clients_per_round, config.seed, config.engine, lr=config.lr,
               local=LocalWork(**config.local), sampling=config.sampling, eval_every=config.eval_every,
               per_client_metrics=config.per_client_metrics, extra_metrics=extra,
               divergence_factor=config.divergence_factor, eval_train=config.eval_train, progress=progress)


# ------------------------------------------------------------------------------------------ the cache
def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; results are meant to be shared
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _history_bytes(history: pd.DataFrame) -> bytes:
    import gzip

    text = history.to_csv(index=False).encode()
    return gzip.compress(text, compresslevel=6, mtime=0)  # mtime 0: the same history gives the same bytes


def store(config: ExperimentConfig, result: RunResult, results_dir: str | Path) -> None:
    """Write a run's files (history, optional model, then the JSON that vouches for them)."""
    folder = Path(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    h = config.hash()
    history = _history_bytes(result.history)
    _atomic_write(folder / f"{h}.csv.gz", history)
    params = None
    if config.save_params:
        buffer = io.BytesIO()
        torch.save(result.params.detach().cpu(), buffer)
        _atomic_write(folder / f"{h}.pt", buffer.getvalue())
        params = {"sha256": _sha256(buffer.getvalue()), "shape": list(result.params.shape)}
    timing = None if result.timing is None else result.timing.to_dict(orient="list")
    meta = {"config": config.key(), "label": config.label, "status": result.status,
            "diverged_round": result.diverged_round, "wall_time": result.wall_time, "timing": timing,
            "history": {"sha256": _sha256(history), "rows": len(result.history)}, "params": params,
            "threads": RUN_THREADS, "platform": numerical_platform()}
    _atomic_write(folder / f"{h}.json", json.dumps(meta, indent=1).encode())


class CacheMiss(Exception):
    """A run's files are absent, or present but not what their JSON vouches for (the message says which)."""


def read_history(path: Path, expected: dict) -> pd.DataFrame:
    """The history in ``path`` if it is what its JSON vouches for (``expected``: its ``history`` entry, the sha256 and
    row count); raises :class:`CacheMiss` naming the file otherwise."""
    if not path.exists():
        raise CacheMiss(f"{path} is missing")
    data = path.read_bytes()
    if _sha256(data) != expected.get("sha256"):
        raise CacheMiss(f"{path} does not match its recorded digest (truncated or edited?)")
    history = pd.read_csv(io.BytesIO(data), compression="gzip")
    if len(history) != expected.get("rows") or list(history.columns) != ["round", "client", "metric", "value"]:
        raise CacheMiss(f"{path} does not have the recorded rows and columns")
    return history


def _load(config: ExperimentConfig, folder: Path, with_params: bool = False):
    """(history, meta[, params]) of a cached run; raises :class:`CacheMiss`."""
    h = config.hash()
    meta_path, history_path, params_path = folder / f"{h}.json", folder / f"{h}.csv.gz", folder / f"{h}.pt"
    if not meta_path.exists():
        raise CacheMiss("")
    try:
        meta = json.loads(meta_path.read_text())
        expected = meta["history"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CacheMiss(f"{meta_path} is not a valid results record ({type(exc).__name__})") from exc
    if meta.get("config") != json.loads(json.dumps(config.key(), default=list)):
        raise CacheMiss(f"{meta_path} describes another config")
    if not isinstance(expected, dict):
        raise CacheMiss(f"{meta_path} is not a valid results record (history)")
    history = read_history(history_path, expected)
    if not with_params:
        return history, meta
    if meta.get("params") is None:
        raise CacheMiss(f"{meta_path}: this run was stored without its model (set save_params=True)")
    if not params_path.exists():
        raise CacheMiss(f"{params_path} is missing")
    blob = params_path.read_bytes()
    if _sha256(blob) != meta["params"].get("sha256"):
        raise CacheMiss(f"{params_path} does not match its recorded digest")
    params = torch.load(io.BytesIO(blob), weights_only=True)
    if not isinstance(params, torch.Tensor) or list(params.shape) != meta["params"].get("shape"):
        raise CacheMiss(f"{params_path} does not hold a tensor of the recorded shape")
    return history, meta, params


def is_cached(config: ExperimentConfig, results_dir: str | Path, with_params: bool = False) -> bool:
    """Whether a verified result of ``config`` is in ``results_dir`` (warns, naming the file, if one is there
    but fails verification)."""
    try:
        _load(config, Path(results_dir), with_params or config.save_params)
        return True
    except CacheMiss as miss:
        if str(miss):
            warnings.warn(f"{miss}; the run will be recomputed", stacklevel=2)
        return False


def load_result(config: ExperimentConfig, results_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """(history, metadata) of a cached run (``ConfigError`` if it is not there or fails verification)."""
    try:
        return _load(config, Path(results_dir))
    except CacheMiss as miss:
        reason = str(miss) or "not run yet"
        raise ConfigError(f"no verified result for {config.label or config.hash()}: {reason}") from None


def load_params(config: ExperimentConfig, results_dir: str | Path) -> torch.Tensor:
    """The final global model of a cached run stored with ``save_params=True``."""
    try:
        return _load(config, Path(results_dir), with_params=True)[2]
    except CacheMiss as miss:
        reason = str(miss) or "not run yet"
        raise ConfigError(f"no verified model for {config.label or config.hash()}: {reason}") from None


def _run_and_store(config: ExperimentConfig, results_dir: str) -> tuple[str, str | None]:
    """Worker: run with ``RUN_THREADS`` threads and store; returns (hash, error message or None)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(RUN_THREADS)
    try:
        store(config, run_config(config), results_dir)
        return config.hash(), None
    except Exception as exc:  # noqa: BLE001  (recorded per run; the sweep goes on)
        return config.hash(), f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    finally:
        torch.set_num_threads(threads)


def sweep(
    configs: list[ExperimentConfig],
    results_dir: str | Path = "results",
    jobs: int | None = None,
    refresh: bool = False,
    progress: bool = True,
    on_failure: str = "raise",
) -> pd.DataFrame:
    """Run every config not yet in ``results_dir`` (all of them if ``refresh``) and return one tidy frame.

    Every config is validated before any runs. Columns: the config columns (``label, task, algorithm, seed,
    lr, clients_per_round, rounds`` and each hyperparameter under its own name), ``hash, status, round,
    client, metric, value``. A run that diverges is stored with status ``diverged``; one that raises is
    reported as ``failed`` and not stored, and the sweep goes on either way; once every config has run, failures
    raise a ``RuntimeError`` naming them (``on_failure='raise'``, the default: a figure must not silently lose runs)
    or only warn (``'warn'``: the frame then lacks the failed runs). ``jobs``
    processes (default: the CPU count) share the machine, each run with ``RUN_THREADS`` threads.
    ``frame.attrs['runs']`` holds one row per config: its columns, status, diverged round and error.
    """
    if not isinstance(configs, (list, tuple)) or not all(isinstance(c, ExperimentConfig) for c in configs):
        raise ConfigError("configs must be a list of ExperimentConfig")
    if jobs is not None:
        check_number("jobs", jobs, low=1, integer=True)
    check_choice("on_failure", on_failure, ("raise", "warn"))
    configs = [c.validate() for c in configs]
    folder = Path(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    todo = list({c.hash(): c for c in configs if refresh or not is_cached(c, folder)}.values())
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
    errors: dict[str, str] = {}
    bar = tqdm(total=len(configs), desc="runs", disable=not progress)
    bar.update(len(configs) - len(todo))
    if jobs == 1:
        for c in todo:
            h, error = _run_and_store(c, str(folder))
            if error:
                errors[h] = error
            bar.update()
    elif todo:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            for future in as_completed([pool.submit(_run_and_store, c, str(folder)) for c in todo]):
                h, error = future.result()
                if error:
                    errors[h] = error
                bar.update()
    bar.close()
    frames, runs = [], []
    for c in configs:
        columns = config_columns(c) | {"hash": c.hash()}
        if c.hash() in errors:
            runs.append(columns | {"status": "failed", "diverged_round": None, "error": errors[c.hash()]})
            continue
        history, meta = load_result(c, folder)
        runs.append(columns | {"status": meta["status"], "diverged_round": meta["diverged_round"], "error": None})
        frames.append(history.assign(**columns, status=meta["status"]))
    if errors:
        names = ", ".join(r["label"] for r in runs if r["status"] == "failed")
        first = next(iter(errors.values())).splitlines()[0]
        message = f"{len(errors)} of {len(configs)} runs failed ({names}); first error: {first}"
        if on_failure == "raise":
            raise RuntimeError(f"{message}\n{next(iter(errors.values()))}")
        warnings.warn(message, stacklevel=2)
    order = list(config_columns(configs[0]) if configs else []) + ["hash", "status", "round", "client", "metric",
                                                                    "value"]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=order)
    frame = frame[[c for c in order if c in frame.columns] + [c for c in frame.columns if c not in order]]
    frame.attrs["runs"] = pd.DataFrame(runs)
    return frame


def timings(configs: list[ExperimentConfig], results_dir: str | Path = "results") -> pd.DataFrame:
    """``label, seed, round, compute_time`` of cached runs (seconds vary between runs, so they are kept apart
    from the histories)."""
    frames = []
    for c in configs:
        meta = load_result(c, results_dir)[1]
        if meta.get("timing"):
            frames.append(pd.DataFrame(meta["timing"]).assign(label=c.label or c.algorithm, seed=c.seed))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def summarize(frame: pd.DataFrame, metric: str, **where: Any) -> pd.DataFrame:
    """The global ``metric`` at the last evaluated round of each run, as label x seed."""
    rows = frame[(frame.metric == metric) & (frame.client == -1)]
    for k, v in where.items():
        rows = rows[rows[k] == v]
    last = rows.sort_values("round").groupby(["label", "seed"]).tail(1)
    return last.pivot(index="label", columns="seed", values="value")


def choose_setting(scores: pd.DataFrame, margin: float, grid: dict[str, list]) -> dict:
    """The tuned setting of one method, with a documented tie rule and the edges reported.

    ``scores`` has one row per setting: a ``score`` column (larger is better; a diverged run scores -inf) and one
    column per tuned parameter, whose grid values (in increasing order) are in ``grid``. Rule: among the settings
    within ``margin`` of the best score, take the one with the smallest values (the first parameter first): the
    most conservative of those the noise cannot tell apart, so last-bit differences do not flip the choice.
    Returns the chosen row as a dict, plus ``at_edge`` (the parameters with at least three grid values whose
    chosen value is the largest or smallest of its grid) and ``next_diverged`` (whether the next larger value of
    the first parameter, with the others as chosen, diverged: the choice sits at the edge of stability).
    """
    best = scores.score.max()
    names = list(grid)
    close = scores[scores.score >= best - margin].sort_values(names)
    chosen = close.iloc[0].to_dict()
    at_edge = [n for n in names if len(grid[n]) > 2 and chosen[n] in (grid[n][0], grid[n][-1])]
    first = names[0]
    larger = [v for v in grid[first] if v > chosen[first]]
    next_diverged = False
    if larger:
        same = scores[(scores[first] == larger[0])]
        for n in names[1:]:
            same = same[same[n] == chosen[n]]
        next_diverged = bool(len(same) and not np.isfinite(same.score).all())
    return {**chosen, "at_edge": at_edge, "next_diverged": next_diverged}

