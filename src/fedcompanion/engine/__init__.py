"""Sampling, local work, the engines that minimise the unified local objective, and ``run()``."""
from .batched import probe_batched, train_batched
from .local import LocalObjective, probe_loop, train_loop
from .run import GLOBAL, RunResult, register_engine, run
from .sampling import make_sampler
from .schedule import LocalWork, batch_indices

register_engine("batched", train_batched, probe_batched)

__all__ = [
    "GLOBAL",
    "LocalObjective",
    "LocalWork",
    "RunResult",
    "batch_indices",
    "make_sampler",
    "probe_batched",
    "probe_loop",
    "register_engine",
    "run",
    "train_batched",
    "train_loop",
]
