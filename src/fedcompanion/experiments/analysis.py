"""Reading cached runs for figures and verdicts: timings, last-round summaries and paired evidence."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .cache import load_result
from .config import ExperimentConfig


def timings(configs: list[ExperimentConfig], results_dir: str | Path = "results") -> pd.DataFrame:
    """``label, seed, round, compute_time`` of cached runs (seconds vary between runs, so they are kept apart
    from the histories)."""
    frames = []
    for c in configs:
        meta = load_result(c, results_dir)[1]
        if meta.get("timing"):
            frames.append(pd.DataFrame(meta["timing"]).assign(label=c.label or c.algorithm, seed=c.seed))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def summarize(frame: pd.DataFrame, metric: str, **where: Any) -> pd.DataFrame:
    """The global ``metric`` at the last evaluated round of each run, as label x seed."""
    rows = frame[(frame.metric == metric) & (frame.client == -1)]
    for k, v in where.items():
        rows = rows[rows[k] == v]
    last = rows.sort_values("round").groupby(["label", "seed"]).tail(1)
    return last.pivot(index="label", columns="seed", values="value")


def per_seed_evidence(table: pd.DataFrame, column: str, method: str, baseline: str, better: str, setting: str,
                      question: str | None = None, holds_if: str = "better", seeds: list[int] | None = None,
                      margin: float | None = None):
    """Paired :class:`~fedcompanion.verdict.Evidence` from a per-run table indexed by ``(label, seed)``:
    ``method`` against ``baseline`` in ``column`` on the seeds both ran (``seeds``: all of the table's). A run
    missing from the table (it diverged) enters as the worst value, ``-inf`` if higher is better else ``+inf``; a
    not-worse item declares its non-inferiority ``margin`` in the column's units."""
    from ..verdict import paired

    values = table[column]
    seeds = sorted(set(values.index.get_level_values("seed"))) if seeds is None else list(seeds)
    worst = -np.inf if better == "higher" else np.inf

    def column_of(label):
        return [float(values.get((label, s), worst)) if np.isfinite(values.get((label, s), np.nan)) else worst
                for s in seeds]
    return paired(setting, question or f"{method} vs {baseline}", column, better, column_of(method),
                  column_of(baseline), seeds, holds_if, margin)
