"""A run as data (:class:`ExperimentConfig`), its validation, and its key: what names its cached results.

The key is the canonical JSON of the config (``label`` excluded), plus ``code``: the fingerprint of the code this
run executes (:mod:`fedcompanion.infra.fingerprint`, from
the run driver and the registry entries the config names: its algorithm (and any algorithm that one names, by a
hyperparameter or a default), engine, task builder, dataset loader, partitioner and metrics), plus ``files``: the
checksums of the shipped data files its task reads, plus ``data`` for a user's own dataset or task: a digest of its
content, not its name.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from dataclasses import dataclass, field
from typing import Any

from ..algorithms.base import REGISTRY, make
from ..data.files import checksums
from ..data.loaders import LOADERS, dataset_digest, held_digest
from ..data.partition import PARTITIONS, partition_parameters
from ..engine import ENGINES, LocalWork
from ..engine.sampling import SAMPLINGS
from ..infra.fingerprint import fingerprint, in_package
from ..losses import LOSSES
from ..models import MODELS
from ..protocol import DIVERGENCE_FACTOR
from ..registry import registry
from ..settings import check_declared_needs
from ..tasks import TASKS, is_partitioned, linear_design, task_digest
from ..validation import ConfigError, check_argument, check_choice, check_device


@dataclass
class ExperimentConfig:
    """One run, as data.

    Attributes:
        task: builder name (``dataset``, ``least_squares``, ``synthetic``, ``qsar``, ``clustering``, or one
            registered with ``register_task``).
        task_args: keyword arguments of the builder (its ``seed`` is the config's ``seed``); for a partitioned task
            (``dataset``, ``clustering``), also the partition's parameters.
        algorithm, hyperparameters: ``fedcompanion.make(algorithm, **hyperparameters)``.
        rounds: communication rounds (iterations for the ADMM family).
        clients_per_round, lr, local, sampling, engine: as in :func:`fedcompanion.run` (``local`` holds the
            keyword arguments of :class:`~fedcompanion.engine.LocalWork`); the ADMM family needs
            ``clients_per_round=None`` (every client in every iteration).
        eval_every: evaluate every so many rounds.
        per_client_metrics: record each client's loss and accuracy at each evaluation.
        eval_train: evaluate on the clients' training data (see :func:`fedcompanion.run`).
        metrics: extra metrics by name (see ``METRICS``): ``suboptimality``, ``distance_to_optimum``,
            ``clustering_objective``, ``clustering_accuracy``, or one registered with ``register_metric``.
        tol: a stopping tolerance on a round's stationarity, for an algorithm that reports one (the ADMM family:
            ||grad f(y)||^2; ``None``: run every round).
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

    # ------------------------------------------------------------------ the key
    def _argument(self, name: str):
        """The task builder's argument ``name``: the config's, else the builder's default (``None``: it has none)."""
        if name in self.task_args:
            return self.task_args[name]
        parameter = inspect.signature(TASKS.lookup(self.task)).parameters.get(name)
        return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default

    def _dataset(self) -> str | None:
        return self._argument("dataset")

    def _partition_scheme(self) -> str | None:
        if not is_partitioned(TASKS.lookup(self.task)):
            return None
        return self.task_args.get("partition_scheme",
                                  inspect.signature(TASKS[self.task]).parameters["partition_scheme"].default)

    def task_roots(self) -> list:
        """What building the task executes, as fingerprint roots: the task builder, its loader and partitioner."""
        roots: list = [TASKS.lookup(self.task)]
        dataset, scheme = self._dataset(), self._partition_scheme()
        if isinstance(dataset, str) and dataset in LOADERS and dataset not in LOADERS.user:  # a user's: its digest
            roots.append(LOADERS[dataset])
        if isinstance(scheme, str) and scheme in PARTITIONS:
            roots.append(PARTITIONS[scheme])
        model = self._argument("model")
        if isinstance(model, str) and model in MODELS:  # the registry is opaque to the fingerprint: the entry named
            roots.append(MODELS[model])
        loss = self._argument("loss")
        if isinstance(loss, str) and loss in LOSSES:  # (an instance: its class)
            roots.append(type(LOSSES[loss]))
        return roots

    def algorithm_classes(self) -> list:
        """The classes the run's algorithm executes: its own and its bases, and those of every algorithm a
        hyperparameter names or a default names (two_block's inner FedVRA), followed to their own defaults."""
        out, seen, todo = [], set(), [(self.algorithm, self.hyperparameters)]
        while todo:
            name, hyperparameters = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            cls = REGISTRY.lookup(name)
            out += [c for c in cls.__mro__[:-1] if c not in out]
            defaults = [p.default for p in inspect.signature(cls).parameters.values()
                        if p.default is not inspect.Parameter.empty and p.name not in hyperparameters]
            todo += [(v, {}) for v in _leaves([hyperparameters, defaults]) if isinstance(v, str) and v in REGISTRY]
        return out

    def code_roots(self) -> list:
        """What the run executes, as fingerprint roots: the run driver, the algorithm's classes (and any algorithm
        it names), the engine (unless the algorithm solves exactly), the sampling, the task's roots and the metrics: the
        core plus the registry entries the config names."""
        from .runner import run_config  # the function that runs a config (its module's other helpers are not run)

        roots: list = [run_config, *self.algorithm_classes(), *self.task_roots()]
        if not REGISTRY.lookup(self.algorithm).solves_exactly:  # (no engine kernel runs for an exact solver)
            roots.append(ENGINES.lookup(self.engine))  # (registries are opaque to the fingerprint: the entries named)
        roots.append(SAMPLINGS.lookup(self.sampling))
        return roots + [registry("metric")[m] for m in self.metrics if m in registry("metric")]

    def package_code(self) -> str:
        """The package's part of the run's code fingerprint: the roots that are the package's own (the driver, the
        package's algorithm classes among the run's, its engine, task builder, loader, partitioner, metrics), not a
        user's. A Dask worker compares it with the asking process's before every run, user entries or not."""
        return fingerprint([r for r in self.code_roots() if in_package(r)])

    def data_files(self) -> dict[str, str]:
        """The shipped files the task reads (declared by its builder and loader) with their checksums in the data
        folder in use."""
        return checksums({f for root in self.task_roots() for f in getattr(root, "data_files", ())})

    def data_digest(self) -> str | None:
        """A digest of a user's own data (a registered dataset's arrays, or a registered task's content)."""
        if self.task in TASKS.user:
            return _user_task_digest(self.task, json.dumps(self.task_args, sort_keys=True), self.seed,
                                     TASKS[self.task])
        dataset = self._dataset()
        return dataset_digest(dataset) if isinstance(dataset, str) and dataset in LOADERS.user else None

    def key(self) -> dict:
        """What names the run's results: the config (no label), the fingerprint of the code it executes and, for a
        user's own data, its digest."""
        d = dataclasses.asdict(self)
        d.pop("label")
        d["code"] = fingerprint(self.code_roots())
        files = self.data_files()
        if files:
            d["files"] = files
        data = self.data_digest()
        if data is not None:
            d["data"] = data
        return d

    def task_key(self) -> str:
        """What the task depends on, as JSON: the per-process task cache's key, the same for every algorithm run on
        one task (so a sweep over algorithms builds it once)."""
        return json.dumps({"task": self.task, "task_args": self.task_args, "seed": self.seed,
                           "code": fingerprint(self.task_roots()), "files": self.data_files(),
                           "data": self.data_digest()}, sort_keys=True,
                          default=list)

    def hash(self) -> str:
        """The first 16 hex digits of the key's SHA-256: the stem of the run's files."""
        return key_hash(self.key())

    # ------------------------------------------------------------------ validation
    def validate(self) -> ExperimentConfig:
        """Fail now, naming the parameter, rather than in a worker process later."""
        for name, kind in (("task_args", dict), ("hyperparameters", dict), ("local", dict), ("metrics", list),
                           ("label", str)):
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        TASKS.lookup(self.task)
        self._check_task_args()
        make(self.algorithm, **self.hyperparameters)
        for name in ("rounds", "eval_every", "seed", "divergence_factor"):
            check_argument(name, getattr(self, name))
        for name in ("per_client_metrics", "save_params", "eval_train"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for metric in self.metrics:
            registry("metric").lookup(metric)
        if not isinstance(self.device, str):
            raise ConfigError(f"device must be a str such as 'cpu' or 'cuda', got {self.device!r}")
        check_device(self.device)
        fields = [f.name for f in dataclasses.fields(LocalWork)]
        unknown = sorted(set(self.local) - set(fields))
        if unknown:
            raise ConfigError(f"local has no field {unknown}; LocalWork's fields are {fields}")
        LocalWork(**self.local)
        check_argument("lr", self.lr)
        check_choice("engine", self.engine, ENGINES)
        SAMPLINGS.lookup(self.sampling)
        check_argument("clients_per_round", self.clients_per_round)
        check_argument("tol", self.tol)
        cls = REGISTRY.lookup(self.algorithm)
        if cls.linear_only:
            self._check_convex_task()
        check_declared_needs(cls, self.clients_per_round, self.sampling, self.tol)
        return self

    def _check_convex_task(self) -> None:
        """The ADMM family solves any task whose model is linear with a least-squares or logistic loss (a user's
        task too): the task is built (cached per process, so the run reuses it) and refused with the reason."""
        from .runner import build_task

        try:
            linear_design(build_task(self))
        except NotImplementedError as exc:
            raise ConfigError(f"{self.algorithm} needs a linear model with a least-squares or logistic loss: "
                              f"{exc}") from None

    def _check_task_args(self) -> None:
        builder = TASKS[self.task]
        fixed = ("seed", "partition_kwargs", "dtype", "device")  # the config's own, or not expressible in JSON
        parameters = inspect.signature(builder).parameters
        allowed = [p for p, v in parameters.items() if p not in fixed and v.kind != inspect.Parameter.VAR_KEYWORD]
        scheme = self._partition_scheme()
        if scheme is not None:
            PARTITIONS.lookup(scheme)
        extra = list(partition_parameters(scheme)) if scheme is not None else []
        unknown = sorted(set(self.task_args) - set(allowed) - set(extra))
        if unknown:
            where = f" and the {scheme!r} partition's" if scheme is not None else ""
            raise ConfigError(f"task {self.task!r} has no argument {unknown}; its arguments{where} are "
                              f"{allowed + extra}")
        dataset = self._dataset()
        if "dataset" in parameters and dataset is not None:
            LOADERS.lookup(dataset)


def key_hash(key: dict) -> str:
    """The first 16 hex digits of a key's canonical JSON's SHA-256: the stem of the run's files."""
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=list).encode()).hexdigest()[:16]


def _leaves(value) -> list:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _user_task_digest(name: str, args_json: str, seed: int, builder) -> str:
    """The digest of a registered user task's content, as its builder makes it now (once per
    :func:`~fedcompanion.data.loaders.hold_digests` block)."""
    return held_digest(builder, (name, args_json, seed),
                       lambda: task_digest(builder(seed=seed, **json.loads(args_json))))


def config_columns(config: ExperimentConfig) -> dict[str, Any]:
    """The config as flat columns for results tables: fields, and each hyperparameter under its own name."""
    columns = {"label": config.label or config.algorithm, "task": config.task, "algorithm": config.algorithm,
               "seed": config.seed, "lr": config.lr, "clients_per_round": config.clients_per_round,
               "rounds": config.rounds}
    for name, value in sorted(config.hyperparameters.items()):
        column = name if name not in columns else f"hp_{name}"
        columns[column] = value if isinstance(value, (int, float, str, bool, type(None))) else json.dumps(value)
    return columns
