"""Parallel sweeps: every config not yet in the cache, run by workers, stored by this process, read back as one frame.

Every run in a sweep uses ``RUN_THREADS`` torch threads whatever ``jobs`` is, so a run's numbers depend only on its
config and seed: not on ``jobs``, on the order of the sweep, on the worker or machine that computed it (of one CPU
kind), or on what was cached before (on another CPU, or with another torch or BLAS, the last bits differ: hence the
recorded platform). The workers (:mod:`.pool`: this machine's processes, or a Dask cluster's) start with the user's
own registrations (algorithms, tasks, datasets, partitions, metrics registered outside the package), so what runs in
the notebook runs in the pool; they compute and hand the result back, and only this process writes the cache.
"""
from __future__ import annotations

import asyncio
import os
import tempfile
import warnings
from concurrent.futures import CancelledError, Executor, as_completed
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ..data.loaders import hold_digests, transportable
from ..infra.atomic import clean_torn
from ..registry import user_entries
from ..validation import ConfigError, check_choice, check_number
from .cache import is_cached, load_result, store
from .config import ExperimentConfig, config_columns
from .pool import compute, executor_for, scheduler_address


def by_task(configs: list[ExperimentConfig]) -> list[ExperimentConfig]:
    """``configs`` in the order they are computed: grouped by :meth:`ExperimentConfig.task_key` (the per-process
    task cache's key), in the order each task first appears, so that a process builds each task once however the
    sweep was written (tuning sweeps list the seeds innermost; the cache holds only a few MNIST tasks). The order
    changes no number: each run depends only on its config."""
    first: dict[str, int] = {}
    keys = [first.setdefault(c.task_key(), len(first)) for c in configs]
    return [c for _, c in sorted(zip(keys, configs), key=lambda pair: pair[0])]


def sweep(
    configs: list[ExperimentConfig],
    results_dir: str | Path = "results",
    jobs: int | None = None,
    refresh: bool = False,
    progress: bool = True,
    on_failure: str = "raise",
    executor: Executor | None = None,
) -> pd.DataFrame:
    """Run every config not yet in ``results_dir`` (all of them if ``refresh``) and return one tidy frame.

    Every config is validated before any runs. Columns: the config columns (``label, task, algorithm, seed,
    lr, clients_per_round, rounds`` and each hyperparameter under its own name), ``hash, status, round,
    client, metric, value``. A run that diverges is stored with status ``diverged``; one that raises is
    reported as ``failed`` and not stored, and the sweep goes on either way; once every config has run, failures
    raise a ``RuntimeError`` naming them (``on_failure='raise'``, the default: a figure must not silently lose runs)
    or only warn (``'warn'``: the frame then lacks the failed runs). ``jobs``
    processes (default: the CPU count) share the machine, each run with ``RUN_THREADS`` threads; ``executor`` (a
    ``concurrent.futures`` executor such as a Dask client's ``get_executor()``), or a Dask scheduler's address in
    ``FEDCOMPANION_SCHEDULER``, sends the runs there instead (:mod:`.pool`). Results are stored by this process.
    ``frame.attrs['runs']`` holds one row per config: its columns, status, diverged round and error.
    """
    if not isinstance(configs, (list, tuple)) or not all(isinstance(c, ExperimentConfig) for c in configs):
        raise ConfigError("configs must be a list of ExperimentConfig")
    if jobs is not None:
        check_number("jobs", jobs, low=1, integer=True)
    check_choice("on_failure", on_failure, ("raise", "warn"))
    with hold_digests():  # a user's data is read as it is now, once for the whole sweep
        return _sweep([c.validate() for c in configs], Path(results_dir), jobs, refresh, progress, on_failure,
                      executor)


def _sweep(configs: list[ExperimentConfig], folder: Path, jobs: int | None, refresh: bool, progress: bool,
           on_failure: str, executor: Executor | None) -> pd.DataFrame:
    """The work of :func:`sweep` on validated configs."""
    todo = by_task(list({c.hash(): c for c in configs if refresh or not is_cached(c, folder)}.values()))
    if todo:  # a folder that will be written (a fully cached sweep only reads: a read-only folder serves it)
        folder.mkdir(parents=True, exist_ok=True)
        try:  # find out now, not after every run has been computed
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as error:
            raise ConfigError(f"results_dir {str(folder)!r} is not writable ({error.strerror})") from None
        for torn in clean_torn(folder):
            warnings.warn(f"removed {torn}, left by an interrupted write", stacklevel=2)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
    errors: dict[str, str] = {}
    bar = tqdm(total=len(configs), desc="runs", disable=not progress)
    bar.update(len(configs) - len(todo))

    def finished(config: ExperimentConfig, key: dict, result, error: str | None, platform: dict) -> None:
        if error:
            errors[config.hash()] = error
        else:
            store(config, result, folder, key=key, platform=platform)  # the platform of the worker that computed it
        bar.update()

    keyed = [(c, c.key()) for c in todo]
    entries = None
    if todo and (jobs > 1 or executor is not None or scheduler_address()):
        try:
            entries = user_entries({"dataset": transportable})
        except ConfigError as refusal:  # under FEDCOMPANION_SCHEDULER alone, with jobs=1: computed here instead
            if jobs > 1 or executor is not None:
                raise
            warnings.warn(f"{refusal.args[0].split(';')[0]}: its runs are computed in this process, not on the "
                          "Dask cluster", stacklevel=2)
    if entries is None:
        for c, key in keyed:
            finished(c, key, *compute(c, key))
    else:
        with executor_for(jobs, entries, executor) as pool:
            futures = {pool.submit(compute, c, key, entries, c.package_code()): (c, key) for c, key in keyed}
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except (CancelledError, asyncio.CancelledError):  # a Dask scheduler that went away
                    raise RuntimeError(f"the sweep's runs were cancelled by the executor (the Dask scheduler stopped "
                                       f"or lost its workers?): {bar.n - len(errors)} of {len(configs)} runs are "
                                       "stored; run the sweep again to compute the rest") from None
                finished(*futures[future], *outcome)
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
