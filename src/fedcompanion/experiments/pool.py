"""Where a sweep's runs are computed: this machine's worker processes, or the workers of a Dask cluster.

Either way a worker only *computes*: it runs a config (:func:`compute`) and hands the result back, and the process
that asked for it, the one writer, stores it in its own results folder. So the cache is written atomically by one
process, a worker that dies mid-run leaves nothing behind (Dask gives its run to another worker), and a cluster's
workers need no access to the results folder, only the package: the same version on the scheduler (it unpickles
the task graph) and on every worker (a worker whose package code differs from the asking process's refuses every
run). The Dask path trusts its cluster: no authentication or encryption unless Dask's TLS is configured
(docs/usage.md).

* ``jobs`` worker processes on this machine (:func:`local_pool`): spawned, each told to exit with its parent, each
  started with the user's own registrations.
* a Dask cluster (``pip install 'fedcompanion[dask]'``): ``sweep(..., executor=client.get_executor())``, or for every
  sweep of a process and its notebooks' kernels the address in ``FEDCOMPANION_SCHEDULER``
  (``tcp://HOST:8786``; :func:`scheduler_executor`); ``python -m fedcompanion.reproduction.reproduce --scheduler
  ADDRESS`` sets it, and ``--scheduler local`` starts a cluster of this machine's cores that every notebook of the
  reproduction shares: one queue, no core idle while a run of any notebook waits.
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

from ..data.loaders import hold_digests
from ..infra.machine import numerical_platform
from ..protocol import RunResult
from ..registry import restore
from ..validation import ConfigError
from .config import ExperimentConfig
from .runner import RUN_THREADS, run_config

SCHEDULER_VARIABLE = "FEDCOMPANION_SCHEDULER"


def compute(config: ExperimentConfig, key: dict, entries: dict | None = None, package: str | None = None
            ) -> tuple[RunResult | None, str | None, dict]:
    """A worker's job: register the user's ``entries`` (a cluster's worker has not seen them), run ``config`` with
    ``RUN_THREADS`` torch threads and return ``(result, None, platform)``, or ``(None, the error, platform)``;
    ``platform`` is this worker's numerical platform (:func:`~fedcompanion.infra.machine.numerical_platform`), which the
    stored run records. ``package`` is the asking process's :meth:`ExperimentConfig.package_code`: a worker whose
    package code for the run differs refuses it, whatever the run uses; and ``key`` is the asker's key of the
    config: without user entries (whose modules may have other names here) a worker whose code keys the run
    otherwise refuses it too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(RUN_THREADS)
    try:
        if entries:
            restore(entries)
        if package is not None and package != config.package_code():
            raise ConfigError(f"this worker ({os.uname().nodename}) runs other fedcompanion code than the process "
                              f"that asked for the run (package code {config.package_code()} against {package}): "
                              "install the same version on every worker")
        if not entries and config.key()["code"] != key["code"]:
            raise ConfigError(f"this worker ({os.uname().nodename}) runs other fedcompanion code than the process "
                              "that asked for the run: install the same version on every worker")
        with hold_digests():
            return run_config(config), None, numerical_platform()
    except Exception as exc:  # noqa: BLE001  (recorded per run; the sweep goes on)
        return None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}", numerical_platform()
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


SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")
CONNECT_SECONDS = 30.0  # how long a scheduler may take to answer (handshake included)


def check_address(address: str) -> str:
    """``address`` if it reads as a Dask scheduler's address (``tcp://HOST:PORT``, or another of ``SCHEMES``; a bare
    ``HOST:PORT`` is TCP's), else :class:`ConfigError` naming it: found before any run, in the package's words."""
    from urllib.parse import urlsplit

    text = address if "://" in address else f"tcp://{address}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        port, parts = None, None
    if parts is None or parts.scheme not in SCHEMES or (parts.scheme != "inproc" and (not parts.hostname or not port)):
        raise ConfigError(f"{SCHEDULER_VARIABLE} / --scheduler {address!r} is not a Dask scheduler's address: write "
                          f"SCHEME://HOST:PORT, e.g. tcp://127.0.0.1:8786 (schemes: {', '.join(SCHEMES)})")
    return text


def connect(address: str, timeout: float | None = None):
    """A Dask client of the scheduler at ``address``, or :class:`ConfigError` within ``timeout`` seconds (default
    ``CONNECT_SECONDS``): a wrong address, a closed port, and a port that accepts and never answers (Dask's own
    timeout does not bound the handshake there) all fail in the package's words, naming the address."""
    address, timeout = check_address(address), CONNECT_SECONDS if timeout is None else timeout
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError(f"{SCHEDULER_VARIABLE}={address!r} needs Dask's distributed scheduler: "
                          "pip install 'fedcompanion[dask]'") from None
    import threading

    outcome: dict = {}

    def attempt() -> None:
        try:
            outcome["client"] = Client(address, set_as_default=False, timeout=timeout)
        except Exception as error:  # noqa: BLE001  (reported below, in the package's words)
            outcome["error"] = error

    thread = threading.Thread(target=attempt, name="dask-connect", daemon=True)
    thread.start()
    thread.join(timeout + 5)
    if thread.is_alive():
        raise ConfigError(f"the Dask scheduler at {address!r} ({SCHEDULER_VARIABLE}) took the connection but did "
                          f"not answer within {timeout:.0f} s: is it a Dask scheduler, and is it overloaded?")
    if "error" in outcome:
        error = outcome["error"]
        raise ConfigError(f"no Dask scheduler answers at {address!r} ({SCHEDULER_VARIABLE}): "
                          f"{type(error).__name__}: {error}") from None
    return outcome["client"]


@contextlib.contextmanager
def scheduler_executor(address: str):
    """A ``concurrent.futures`` executor on the Dask cluster whose scheduler is at ``address``, closed on exit."""
    client = connect(address)
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


@contextlib.contextmanager
def shared_pool(scheduler: str | None, cpus: int):
    """The Dask scheduler every notebook's sweeps submit to (its address, exported to the kernels as
    ``FEDCOMPANION_SCHEDULER``), or ``None`` for each notebook's own pool: ``scheduler`` is an address, or
    ``local`` for a cluster of ``cpus`` one-thread worker processes on 127.0.0.1, started here and stopped on exit."""
    if not scheduler:
        yield None
        return
    cluster = None
    if scheduler != "local":  # checked once, here: not 30 s into every notebook's first sweep
        try:
            connect(scheduler).close()
        except ConfigError as error:
            raise SystemExit(f"error: {error}") from None
    if scheduler == "local":
        try:
            from distributed import LocalCluster
        except ImportError:
            raise SystemExit("error: --scheduler local needs Dask's distributed: "
                             "pip install 'fedcompanion[dask]'") from None
        cluster = LocalCluster(n_workers=cpus, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None)
        scheduler = cluster.scheduler_address
    saved = os.environ.get(SCHEDULER_VARIABLE)
    os.environ[SCHEDULER_VARIABLE] = scheduler
    try:
        yield scheduler
    finally:
        if saved is None:
            os.environ.pop(SCHEDULER_VARIABLE, None)
        else:
            os.environ[SCHEDULER_VARIABLE] = saved
        if cluster is not None:
            cluster.close()
