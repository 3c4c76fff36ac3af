"""Where a sweep's runs are computed: this machine's worker processes, or the workers of a Dask cluster.

Either way a worker only *computes*: it runs a config (:func:`compute`) and hands the result back, and the process
that asked for it, the one writer, stores it in its own results folder. So the cache is written atomically by one
process, a worker that dies mid-run leaves nothing behind (Dask gives its run to another worker), and a cluster's
workers need no access to the results folder, only the package (the same version: a worker whose code gives a run
another key than the asking process's refuses it).

* ``jobs`` worker processes on this machine (:func:`local_pool`): spawned, each told to exit with its parent, each
  started with the user's own registrations.
* a Dask cluster (``pip install 'fedcompanion[dask]'``): ``sweep(..., executor=client.get_executor())``, or for every
  sweep of a process and its notebooks' kernels the address in ``FEDCOMPANION_SCHEDULER``
  (``tcp://HOST:8786``; :func:`scheduler_executor`); ``python -m fedcompanion.reproduce --scheduler ADDRESS`` sets it,
  and ``--scheduler local`` starts a cluster of this machine's cores that every notebook of the reproduction shares:
  one queue, no core idle while a run of any notebook waits.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import traceback
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path

import torch

from ..protocol import RunResult
from ..registry import restore
from ..validation import ConfigError
from .config import ExperimentConfig
from .runner import RUN_THREADS, run_config

SCHEDULER_VARIABLE = "FEDCOMPANION_SCHEDULER"


def compute(config: ExperimentConfig, key: dict, entries: dict | None = None) -> tuple[RunResult | None, str | None]:
    """A worker's job: register the user's ``entries`` (a cluster's worker has not seen them), run ``config`` with
    ``RUN_THREADS`` torch threads and return ``(result, None)``, or ``(None, the error)``. ``key`` is the asking
    process's key of the config: a worker whose own code keys the run otherwise refuses it (a run under a user's
    entry is keyed by the asker alone: its module may have another name here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(RUN_THREADS)
    try:
        if entries:
            restore(entries)
        elif config.key()["code"] != key["code"]:
            raise ConfigError(f"this worker ({os.uname().nodename}) runs other fedcompanion code than the process "
                              "that asked for the run: install the same version on every worker")
        return run_config(config), None
    except Exception as exc:  # noqa: BLE001  (recorded per run; the sweep goes on)
        return None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    finally:
        torch.set_num_threads(threads)


def _die_with_parent(parent: int, interval: float = 1.0) -> None:
    """Exit this worker once its parent (process id ``parent``, given by the parent itself: it may be gone before
    this runs) is gone: a killed sweep must not leave workers computing for minutes. A daemon thread watches."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _start_worker(parent: int, entries: dict) -> None:
    """A local worker's initializer: die with the parent, and register the user's own entries."""
    _die_with_parent(parent)
    restore(entries)


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


def local_pool(jobs: int, entries: dict) -> ProcessPoolExecutor:
    """``jobs`` spawned worker processes on this machine, each started with the user's ``entries``."""
    check_spawnable()
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                               initargs=(os.getpid(), entries))


def scheduler_address() -> str | None:
    """The Dask scheduler every sweep of this process submits to (``FEDCOMPANION_SCHEDULER``), if one is set."""
    return os.environ.get(SCHEDULER_VARIABLE) or None


@contextlib.contextmanager
def scheduler_executor(address: str):
    """A ``concurrent.futures`` executor on the Dask cluster whose scheduler is at ``address``, closed on exit."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError(f"{SCHEDULER_VARIABLE}={address!r} needs Dask's distributed scheduler: "
                          "pip install 'fedcompanion[dask]'") from None
    try:
        client = Client(address, set_as_default=False, timeout=30)
    except OSError as error:
        raise ConfigError(f"no Dask scheduler answers at {address!r} ({SCHEDULER_VARIABLE}): {error}") from None
    try:
        yield client.get_executor(pure=False)  # every submission is a run of its own, even the same config twice
    finally:
        client.close()


@contextlib.contextmanager
def executor_for(jobs: int, entries: dict, executor: Executor | None = None):
    """The executor a sweep submits to: the one given (left open), else the cluster of ``FEDCOMPANION_SCHEDULER``,
    else :func:`local_pool`."""
    if executor is not None:
        yield executor
        return
    address = scheduler_address()
    if address:
        with scheduler_executor(address) as cluster:
            yield cluster
        return
    with local_pool(jobs, entries) as pool:
        yield pool
