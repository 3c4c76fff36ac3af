"""Parallel sweeps: every config not yet in the cache, run in worker processes, then read back as one frame.

Every run in a sweep uses ``RUN_THREADS`` torch threads whatever ``jobs`` is, so a run's numbers depend only on its
config and seed: not on ``jobs``, on the order of the sweep, or on what was cached before (on another CPU, or with
another torch or BLAS, the last bits differ: hence the recorded platform). The workers start with the user's own
registrations (algorithms, tasks, datasets, partitions, metrics registered outside the package), so what runs in
the notebook runs in the pool.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..atomic import clean_torn
from ..data.loaders import transportable
from ..registry import restore, user_entries
from ..validation import ConfigError, check_choice, check_number
from .cache import is_cached, load_result, store
from .config import ExperimentConfig, config_columns, forget_user_digests, key_hash
from .runner import RUN_THREADS, run_config


def _die_with_parent(parent: int, interval: float = 1.0) -> None:
    """Exit this worker once its parent (process id ``parent``, given by the parent itself: it may be gone before
    this runs) is gone: a killed sweep must not leave workers computing, and holding its output open, for minutes.
    A daemon thread watches the parent process id."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _start_worker(parent: int, entries: dict) -> None:
    """A worker's initializer: die with the parent, and register the user's own entries."""
    _die_with_parent(parent)
    restore(entries)


def _run_and_store(config: ExperimentConfig, results_dir: str, key: dict) -> tuple[str, str | None]:
    """Worker: run with ``RUN_THREADS`` threads and store under ``key`` (the parent's: a worker may see a user's
    code under another module name); returns (hash, error message or None)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(RUN_THREADS)
    try:
        store(config, run_config(config), results_dir, key=key)
        return key_hash(key), None
    except Exception as exc:  # noqa: BLE001  (recorded per run; the sweep goes on)
        return key_hash(key), f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    finally:
        torch.set_num_threads(threads)


def check_spawnable() -> None:
    """Refuse, before any run, to start worker processes from a script with no ``if __name__ == "__main__":`` guard
    (each worker would run the script again; a user entry that cannot travel is refused by ``user_entries``)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and path.endswith(".py") and Path(path).is_file() and getattr(main, "__spec__", None) is None:
        text = Path(path).read_text(errors="replace")
        if "__name__" not in text or "__main__" not in text:
            raise ConfigError(
                f"{path} starts worker processes (jobs > 1) without an `if __name__ == \"__main__\":` guard: each "
                "worker would run the script again. Put the script's work under that guard, or use jobs=1")


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
    forget_user_digests()  # a user's data is read as it is now
    configs = [c.validate() for c in configs]
    folder = Path(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    try:  # find out now, not after every run has been computed
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise ConfigError(f"results_dir {str(folder)!r} is not writable ({error.strerror})") from None
    for torn in clean_torn(folder):
        warnings.warn(f"removed {torn}, left by an interrupted write", stacklevel=2)
    todo = by_task(list({c.hash(): c for c in configs if refresh or not is_cached(c, folder)}.values()))
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
    errors: dict[str, str] = {}
    bar = tqdm(total=len(configs), desc="runs", disable=not progress)
    bar.update(len(configs) - len(todo))
    if jobs == 1:
        for c in todo:
            h, error = _run_and_store(c, str(folder), c.key())
            if error:
                errors[h] = error
            bar.update()
    elif todo:
        ctx = multiprocessing.get_context("spawn")
        entries = user_entries({"dataset": transportable})
        check_spawnable()
        start = {"initializer": _start_worker, "initargs": (os.getpid(), entries)}
        with ProcessPoolExecutor(jobs, mp_context=ctx, **start) as pool:
            for future in as_completed([pool.submit(_run_and_store, c, str(folder), c.key()) for c in todo]):
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
