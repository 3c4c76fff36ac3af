"""Sampling, local work, the engines that minimise the unified local objective, and ``run()``."""
from .local import LocalObjective, probe_loop, train_loop
from .run import GLOBAL, RunResult, register_engine, run
from .sampling import make_sampler
from .schedule import LocalWork, batch_indices

__all__ = [
    "GLOBAL",
    "LocalObjective",
    "LocalWork",
    "RunResult",
    "batch_indices",
    "make_sampler",
    "probe_loop",
    "register_engine",
    "run",
    "train_loop",
]
