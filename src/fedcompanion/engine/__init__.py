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
from .sampling import SAMPLINGS, make_sampler, register_sampling
from .schedule import LocalWork, batch_indices


def _check_engine(name: str, engine) -> tuple:
    """An engine is a pair (train, probe); a train function alone is paired with :func:`probe_loop`."""
    pair = (engine, probe_loop) if callable(engine) else engine
    if not (isinstance(pair, tuple) and len(pair) == 2 and all(callable(part) for part in pair)):
        raise ConfigError(f"register_engine({name!r}, train, probe): both must be callable, got {engine!r}")
    return tuple(pair)


ENGINES = Registry("engine", _check_engine)


def register_engine(name: str, train=None, probe=None):
    """Add an engine: ``train(task, objective, clients, seed=, round=, batch_size=) -> (x [K, P], buffers)`` and
    ``probe(task, x0, clients, samples, seed, round, gradient=) -> (losses [K], grads [K, P] or None)`` (default:
    :func:`probe_loop`, every built-in's; ``train`` may also be the pair; without either, a decorator of ``train``).
    Its code is in the key of every run on it (a built-in's name taken over keys the runs by the new code), and a
    sweep's worker processes receive it like any other user entry."""
    if train is None:
        return lambda fn: (register_engine(name, fn, probe), fn)[1]
    return ENGINES.register(name, train if probe is None else (train, probe))


# "batched" takes the fastest of its kernels that applies, "batched-clientwise" and "batched-products" name one
# (see .batched). Every engine probes with probe_loop: each active client's full-data loss and gradient at the global
# model by one autograd pass per client (a forward pass only where the algorithm uses the losses alone), measured
# faster than a padded vmap over the clients for both few large and many small clients.
register_engine("batched", train_batched)
register_engine("loop", train_loop)
for _kernel in ("clientwise", "products"):
    register_engine(f"batched-{_kernel}", functools.partial(train_batched, kernel=_kernel))
DEFAULT_ENGINE = "batched"  # the fast one; "loop" is the readable reference and the tests' oracle


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
    "register_sampling",
    "SAMPLINGS",
    "train_batched",
    "train_loop",
]
