"""One tuning protocol for every method a claim compares.

* Grids: :func:`log_grid`, log-spaced values of the same width (in decades) and the same number of points for
  every method, centred on the method's default (for AdaFedAdam on its effective step, see its notebook).
* Seeds: every setting runs on each tuning seed (at least two, disjoint from the evaluation seeds); its score is the
  mean over them, and a setting at which any tuning seed diverged (or failed) is never chosen.
* Choice: the best mean score; settings within ``margin`` of it count as tied and the one closest to the default
  (in log distance) is taken. A choice at the edge of a grid extends that grid by one more log step on that side and
  tunes again (up to ``extend`` times), so the value used lies inside its grid or the edge is reported.
* Report: the chosen values, their score, the default's score ("default vs best") and every diverged tuning run.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..validation import ConfigError, check_grid, check_number, check_seeds
from .config import ExperimentConfig
from .sweep import sweep


def log_grid(centre: float, decades: float = 2.0, points: int = 5) -> list[float]:
    """``points`` values spaced evenly in log10 over ``decades`` decades centred on ``centre`` (3 significant
    digits): ``log_grid(1.0) == [0.1, 0.316, 1.0, 3.16, 10.0]``."""
    if not centre > 0 or points < 2 or not decades > 0:
        raise ConfigError(f"log_grid needs centre > 0, points >= 2, decades > 0; got {centre}, {points}, {decades}")
    return [float(f"{centre * 10 ** (decades * (k / (points - 1) - 0.5)):.3g}") for k in range(points)]


@dataclass
class Spec:
    """What to tune for one method: ``make(setting, seed)`` builds the run, ``grid`` maps each tuned
    hyperparameter to its increasing values, ``default`` is the method's default setting (inside the grid)."""

    make: Callable[[dict, int], ExperimentConfig]
    grid: dict[str, list[float]]
    default: dict[str, float]
    source: str = "tuned"

    def settings(self) -> list[dict]:
        """Every combination of the grid's values, as dicts."""
        names = list(self.grid)
        return [dict(zip(names, combo)) for combo in itertools.product(*(self.grid[n] for n in names))]


@dataclass
class Tuned:
    """One method's tuning outcome."""

    method: str
    setting: dict
    score: float
    default: dict
    default_score: float
    grid: dict[str, list[float]]
    at_edge: list[str]
    scores: pd.DataFrame
    diverged: list[dict] = field(default_factory=list)

    def line(self) -> str:
        """``method: default ... score s0 -> tuned ... score s1`` (the report's "default vs best")."""
        edge = f" (at the edge of its grid: {', '.join(self.at_edge)})" if self.at_edge else ""
        return (f"{self.method}: default {format_setting(self.default)} scores {self.default_score:.4f}, tuned "
                f"{format_setting(self.setting)} scores {self.score:.4f}{edge}")


def format_setting(setting: dict) -> str:
    """``{"lr": 0.1, "mu": 0.01}`` -> ``"lr 0.1, mu 0.01"`` (the notebooks' and the report's way of naming one)."""
    return ", ".join(f"{k} {v:g}" for k, v in setting.items())


def _extend(values: list[float], side: int, default: float) -> list[float]:
    """The grid with one more point on ``side`` (-1: below, +1: above), on the grid's own log step counted from the
    default (the step snapped to an eighth of a decade, so that 0.0316 / 3.16 gives 0.01, not 0.00999)."""
    if len(values) < 2:
        return values
    log_step = round(math.log10(values[1] / values[0]) * 8) / 8
    edge = values[0] if side < 0 else values[-1]
    k = round(math.log10(edge / default) / log_step) + side
    new = float(f"{default * 10 ** (log_step * k):.3g}")
    return [new, *values] if side < 0 else [*values, new]


def _distance(a: dict, b: dict) -> float:
    return sum(abs(math.log10(a[k] / b[k])) if a[k] > 0 and b[k] > 0 else abs(a[k] - b[k]) for k in b)


def tune(specs: dict[str, Spec], seeds: list[int], score: Callable[[pd.DataFrame], pd.Series], results,
         jobs: int = 1, refresh: bool = False, margin: float = 0.0, extend: int = 2) -> dict[str, Tuned]:
    """Tune every method of ``specs`` by the protocol above; ``score(frame)`` maps a sweep's frame to one score
    per run hash (larger is better). All methods' runs of a step go to one sweep (one process pool)."""
    if not specs:
        raise ConfigError("tune needs at least one method to tune (specs is empty)")
    seeds = list(check_seeds("tuning seeds", seeds, least=2))
    check_number("margin", margin, low=0.0)
    check_number("extend", extend, low=0, integer=True)
    grids = {m: {k: check_grid(f"{m} {k}", v) for k, v in s.grid.items()} for m, s in specs.items()}
    for m, s in specs.items():
        missing = [k for k in s.grid if s.default.get(k) not in s.grid[k]]
        if missing:
            raise ConfigError(f"{m}: the default of {missing} is not in its grid")
    done: dict[str, Tuned] = {}
    for attempt in range(extend + 1):
        todo = [m for m in specs if m not in done]
        configs, keys = [], []
        for m in todo:
            spec = Spec(specs[m].make, grids[m], specs[m].default)
            for setting in spec.settings():
                for seed in seeds:
                    configs.append(spec.make(setting, seed))
                    keys.append((m, tuple(setting.items()), seed))
        frame = sweep(configs, results, jobs=jobs, refresh=refresh)
        runs = frame.attrs["runs"].set_index("hash")
        per_run = score(frame) if len(frame) else pd.Series(dtype=float)
        rows = []
        for c, (m, setting, seed) in zip(configs, keys):
            h = c.hash()
            ok = runs.loc[h, "status"] == "ok"
            rows.append({"method": m, **dict(setting), "seed": seed, "ok": ok,
                         "score": float(per_run.get(h, np.nan)) if ok else -np.inf,
                         "round": runs.loc[h, "diverged_round"], "label": c.label})
        table = pd.DataFrame(rows)
        unscored = table[table.ok & table.score.isna()]
        if len(unscored) and len(unscored) == table.ok.sum():  # no finished run scored: not a divergence
            recorded = sorted(frame.metric.unique()) if len(frame) else []
            raise ConfigError(f"the tuning score gives no value for {len(unscored)} finished run(s) (e.g. "
                              f"{unscored.label.iloc[0]!r}): does it name a metric and a round the runs record? "
                              f"They record {recorded}")
        for m in todo:
            part = table[table.method == m]
            names = list(grids[m])
            mean = part.groupby(names).score.agg(lambda s: s.mean() if np.isfinite(s).all() else -np.inf)
            mean = mean.reset_index()
            best = mean.score.max()
            if not np.isfinite(best):
                raise RuntimeError(f"{m}: every tuning setting diverged on some seed; widen the grid")
            close = mean[mean.score >= best - margin].copy()
            close["distance"] = [_distance(dict(zip(names, r[names])), specs[m].default) for _, r in close.iterrows()]
            chosen = close.sort_values(["distance", *names]).iloc[0]
            setting = {n: float(chosen[n]) for n in names}
            edges = {n: (-1 if setting[n] == grids[m][n][0] else 1) for n in names
                     if len(grids[m][n]) > 2 and setting[n] in (grids[m][n][0], grids[m][n][-1])}
            if edges and attempt < extend:
                for n, side in edges.items():
                    grids[m][n] = _extend(grids[m][n], side, specs[m].default[n])
                continue
            default = mean
            for n in names:
                default = default[default[n] == specs[m].default[n]]
            diverged = [{"label": r.label, "seed": int(r.seed), "round": None if pd.isna(r["round"]) else
                         int(r["round"]), "role": "tuning", "setting": {n: float(r[n]) for n in names}}
                        for _, r in part[~part.ok].iterrows()]
            done[m] = Tuned(m, setting, float(chosen.score), dict(specs[m].default), float(default.score.iloc[0]),
                            {n: list(v) for n, v in grids[m].items()}, sorted(edges), part, diverged)
        if len(done) == len(specs):
            break
    return {m: done[m] for m in specs}


def final_score(metric: str, rounds: int | None = None) -> Callable[[pd.DataFrame], pd.Series]:
    """A score: the global ``metric`` at the last evaluated round (or at ``rounds``), per run hash."""
    def score(frame: pd.DataFrame) -> pd.Series:
        rows = frame[(frame.metric == metric) & (frame.client == -1)]
        if rounds is not None:
            rows = rows[rows["round"] == rounds]
        return rows.sort_values("round").groupby("hash").value.last()
    return score


def mean_score(metric: str) -> Callable[[pd.DataFrame], pd.Series]:
    """A score: the mean of the global ``metric`` over the evaluated rounds (the area under its curve)."""
    def score(frame: pd.DataFrame) -> pd.Series:
        rows = frame[(frame.metric == metric) & (frame.client == -1)]
        return rows.groupby("hash").value.mean()
    return score
