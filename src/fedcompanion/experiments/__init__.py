"""Experiments: a run as data, its cache, sweeps over many, and reading them back; the one pipeline every figure
uses.

* :mod:`.config`: :class:`ExperimentConfig`, its validation and its key (the config, the fingerprint of the code
  the run executes, a digest of a user's own data);
* :mod:`.runner`: one config, run (the driver whose code every run's fingerprint covers);
* :mod:`.cache`: the results folder's files, written atomically and verified when read;
* :mod:`.computed`: what a notebook computes besides runs, cached like a run (``results/computed/``);
* :mod:`.sweep`: the configs not yet cached, run in worker processes;
* :mod:`.analysis`: timings, last-round summaries and paired evidence from per-seed tables;
* :mod:`.tuning`: the one tuning protocol (log grids of equal width, disjoint tuning seeds, edges extended);
* :mod:`.named_metrics`: extra metrics by name (:mod:`.stationarity` adds ``gradient_norm_sq``).
"""
from ..tasks import TASKS, register_task
from . import stationarity  # noqa: F401  (registers gradient_norm_sq)
from .analysis import rounds_to, summarize, timings
from .cache import CacheMiss, is_cached, load_params, load_result, read_history, store
from .computed import computed
from .config import ExperimentConfig, config_columns
from .named_metrics import METRICS, register_metric
from .runner import RUN_THREADS, build_task, run_config
from .sweep import sweep
from .tuning import Spec, Tuned, final_score, log_grid, mean_score, tune

__all__ = [
    "METRICS", "RUN_THREADS", "TASKS", "CacheMiss", "ExperimentConfig", "Spec", "Tuned",
    "build_task", "computed", "config_columns", "final_score", "is_cached", "load_params", "load_result", "log_grid",
    "mean_score", "read_history", "register_metric", "register_task", "rounds_to", "run_config", "store", "summarize",
    "sweep", "timings", "tune",
]
