"""Sampling, local work, the engines that minimise the unified local objective, and ``run()``."""
from ..protocol import GLOBAL, LocalObjective, RunResult
from .batched import train_batched
from .loop import probe_loop, train_loop
from .run import ENGINES, Recorder, Schedule, client_work, initial_state, play_round, register_engine, run
from .sampling import make_sampler
from .schedule import LocalWork, batch_indices

__all__ = [
    "ENGINES",
    "GLOBAL",
    "LocalObjective",
    "LocalWork",
    "Recorder",
    "Schedule",
    "client_work",
    "initial_state",
    "RunResult",
    "batch_indices",
    "make_sampler",
    "play_round",
    "probe_loop",
    "register_engine",
    "run",
    "train_batched",
    "train_loop",
]
