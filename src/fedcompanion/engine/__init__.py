"""The engines: each minimises the unified local objective of the active clients, given a schedule of mini-batches.

An engine is a pair ``train(task, objective, clients, seed=, round=, batch_size=) -> (x [K, P], buffers)`` and
``probe(task, x0, clients, samples, seed, round, gradient=) -> (losses [K], grads [K, P] or None)``, kept by name
in :data:`ENGINES` (a registry); :func:`fedcompanion.run` (the driver, :mod:`fedcompanion.driver`) chooses one by
its ``engine`` argument. The engines import the protocol, never an algorithm or the driver.
"""
import functools

from ..protocol import GLOBAL, LocalObjective, RunResult
from ..registry import Registry
from ..validation import ConfigError
from .batched import train_batched
from .loop import probe_loop, train_loop
from .sampling import make_sampler
from .schedule import LocalWork, batch_indices

# "batched" takes the fastest of its kernels that applies, "batched-clientwise" and "batched-products" name one
# (see .batched). Every engine probes with probe_loop: each active client's full-data loss and gradient at the global
# model by one autograd pass per client (a forward pass only where the algorithm uses the losses alone), measured
# faster than a padded vmap over the clients for both few large and many small clients.
ENGINES = Registry("engine")
ENGINES.update({"batched": (train_batched, probe_loop), "loop": (train_loop, probe_loop),
                **{f"batched-{kernel}": (functools.partial(train_batched, kernel=kernel), probe_loop)
                   for kernel in ("clientwise", "products")}})
DEFAULT_ENGINE = "batched"  # the fast one; "loop" is the readable reference and the tests' oracle


def register_engine(name: str, train, probe) -> None:
    """Add an engine: ``train(task, objective, clients, seed=, round=, batch_size=) -> (x [K, P], buffers)``
    and ``probe(task, x0, clients, samples, seed, round, gradient=) -> (losses [K], grads [K, P] or None)``.
    Its code is in the key of every run on it (a built-in's name taken over keys the runs by the new code), and
    a sweep's worker processes receive it like any other user entry."""
    if not callable(train) or not callable(probe):
        raise ConfigError(f"register_engine({name!r}, train, probe): both must be callable")
    ENGINES.register(name, (train, probe))


__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "GLOBAL",
    "LocalObjective",
    "LocalWork",
    "RunResult",
    "batch_indices",
    "make_sampler",
    "probe_loop",
    "register_engine",
    "train_batched",
    "train_loop",
]
