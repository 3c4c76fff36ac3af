"""Reading cached runs for figures: timings, the rounds to a target, last-round summaries (the evidence the verdict rule
reads from runs is built in :mod:`fedcompanion.reproduction.claims.from_runs`)."""
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


def rounds_to(rounds, values, target: float, better: str = "higher") -> float:
    """The first round after the start (round > 0), in increasing order, at which ``values`` reach ``target``:
    ``value >= target`` where higher is better, ``value < target`` where lower is; NaN where none does. The "rounds
    to the target" of Fig. 2's and Fig. 3's claims and of Theorem 1's speed-up (fedvra/03, /04, adafedadam/02)."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    order = np.argsort(np.asarray(rounds), kind="stable")
    r, v = np.asarray(rounds, dtype=float)[order], np.asarray(values, dtype=float)[order]
    hit = np.flatnonzero(((v >= target) if better == "higher" else (v < target)) & (r > 0))
    return float(r[hit[0]]) if len(hit) else float("nan")


def summarize(frame: pd.DataFrame, metric: str, **where: Any) -> pd.DataFrame:
    """The global ``metric`` at the last evaluated round of each run, as label x seed."""
    rows = frame[(frame.metric == metric) & (frame.client == -1)]
    for k, v in where.items():
        rows = rows[rows[k] == v]
    last = rows.sort_values("round").groupby(["label", "seed"]).tail(1)
    return last.pivot(index="label", columns="seed", values="value")
