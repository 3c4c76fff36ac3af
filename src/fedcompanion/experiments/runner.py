"""One config, run: build its task, build its algorithm, drive it (``fc.run``).

This is the run driver every cached result comes from, so its code is part of every run's fingerprint; nothing
here knows about files or processes.
"""
from __future__ import annotations

import functools
import json

from ..algorithms import make
from ..driver import run
from ..engine import LocalWork
from ..protocol import RunResult
from ..registry import registry
from ..tasks import TASKS

RUN_THREADS = 1  # torch threads per run in a sweep: fixed, so that float32 results never depend on ``jobs``


@functools.lru_cache(maxsize=8)  # a notebook's 5 evaluation + 2 tuning seeds of one setting (an MNIST task: ~0.2 GB)
def _build_task(name: str, args_json: str, seed: int, key_json: str):
    return TASKS[name](seed=seed, **json.loads(args_json))


def build_task(config):
    """The config's task (cached per process under the config's task and code key, so a re-registered builder or
    dataset is rebuilt; tasks are never changed by a run, so sharing one is safe)."""
    args = dict(config.task_args)
    if "hidden" in args:
        args["hidden"] = tuple(args["hidden"])
    return _build_task(config.task, json.dumps(args, sort_keys=True), config.seed, config.task_key())


def run_config(config, progress: bool = False) -> RunResult:
    """Run one config (with whatever torch threads are set) and return the :class:`~fedcompanion.RunResult`."""
    config.validate()
    task = build_task(config).to(config.device)
    algorithm = make(config.algorithm, **config.hyperparameters)
    extra = {name: registry("metric")[name](task, config) for name in config.metrics}  # their code: in the key
    return run(task, algorithm, config.rounds, config.clients_per_round, seed=config.seed, engine=config.engine,
               lr=config.lr, local=LocalWork(**config.local), sampling=config.sampling, eval_every=config.eval_every,
               per_client_metrics=config.per_client_metrics, extra_metrics=extra, eval_train=config.eval_train,
               divergence_factor=config.divergence_factor, tol=config.tol, progress=progress)
