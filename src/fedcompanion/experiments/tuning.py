"""One tuning protocol for every method a claim compares, tuned where it is judged.

* Grids: :func:`log_grid`, log-spaced values of the same width (in decades) and the same number of points for
  every method, centred on the method's default (for AdaFedAdam on its effective step, see its notebook).
* Horizon: the runs that decide are as long as the evaluation runs (``spec.make`` builds them at the evaluation
  horizon, on the score the claim is judged by). To pay for it, **successive halving** (Jamieson & Talwalkar 2016;
  Hyperband's inner loop): every setting runs on all tuning seeds (paired) for the first rung's rounds, the best
  ``1/eta`` of them go on to the next rung, ..., and only the last rung runs the full horizon. The rungs are
  ``R / eta^k`` rounds (``k = rungs-1 .. 0``) rounded up to a multiple of ``eval_every``; ``rungs=1`` is the plain
  grid at the full horizon. The default setting always reaches the last rung, so "default vs best" compares both
  at the full horizon.
* Seeds: at least two tuning seeds, refused if they overlap the evaluation seeds; a setting's score is the mean
  over them, and a setting at which any tuning seed diverged (or failed) is never chosen nor promoted.
* Stability: a setting is eligible only if its neighbour one grid step larger in every step size (``spec.steps``,
  by default the hyperparameters named ``lr`` or ``*_lr``) did not diverge on any tuning seed, at any rung it ran.
  So the choice is never the last step before a divergence (the edge of stability). Before a setting is chosen, its
  larger neighbours are run to the full horizon too (halving may have stopped them at a rung before they diverged):
  the choice is then the one the full grid would make wherever the full grid's choice reached the last rung. The
  default is exempt: it is removed only if it diverged itself (the paper's or the authors' setting is never ruled
  out by a neighbour).
* Choice: the best eligible mean score at the last rung; settings within ``margin`` of it count as tied and the one
  closest to the default (in log distance) is taken. Never below the default: where the default finished every
  tuning seed at the full horizon and scores better than that choice, the default is chosen (and a choice below it
  is refused, never reported as tuned). A choice at the edge of a grid extends that grid by one log
  step on that side and runs the new neighbour at the full horizon (up to ``extend`` times), so the value used
  lies inside its grid or the edge is reported (``Tuned.at_edge``).
* Report: the chosen values, their score, the default's score, every diverged tuning run, and the cost
  (``Tuned.rounds_run`` against ``Tuned.rounds_full_grid``, the same grid run in full at the full horizon).
"""
from __future__ import annotations

import dataclasses
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
    """What to tune for one method: ``make(setting, seed)`` builds the run at the evaluation horizon, ``grid`` maps
    each tuned hyperparameter to its increasing values, ``default`` is the method's default setting (inside the
    grid), ``steps`` names the step sizes the stability rule looks at (``None``: ``lr`` and every ``*_lr``)."""

    make: Callable[[dict, int], ExperimentConfig]
    grid: dict[str, list[float]]
    default: dict[str, float]
    source: str = "tuned"
    steps: tuple[str, ...] | None = None

    def settings(self) -> list[dict]:
        """Every combination of the grid's values, as dicts."""
        names = list(self.grid)
        return [dict(zip(names, combo)) for combo in itertools.product(*(self.grid[n] for n in names))]

    def step_names(self) -> tuple[str, ...]:
        """The hyperparameters the stability rule treats as step sizes."""
        if self.steps is not None:
            return tuple(self.steps)
        return tuple(n for n in self.grid if n == "lr" or n.endswith("_lr"))


@dataclass
class Tuned:
    """One method's tuning outcome. ``scores`` has one row per tuning run (``rounds``: its rung)."""

    method: str
    setting: dict
    score: float
    default: dict
    default_score: float
    grid: dict[str, list[float]]
    at_edge: list[str]
    scores: pd.DataFrame
    diverged: list[dict] = field(default_factory=list)
    rounds_full_grid: int = 0

    @property
    def rounds_run(self) -> int:
        """Rounds of all the tuning runs together (the cost successive halving paid)."""
        return int(self.scores["rounds"].sum())

    def deepest(self) -> pd.DataFrame:
        """The rows of ``scores`` at the longest rung each setting reached (one per setting and tuning seed)."""
        names = list(self.grid)
        return self.scores[self.scores["rounds"] == self.scores.groupby(names)["rounds"].transform("max")]

    def table(self) -> pd.DataFrame:
        """One row per setting: the rounds of the longest rung it reached and its mean score there (-inf: a tuning
        seed diverged)."""
        return self.deepest().groupby(list(self.grid)).agg(rounds=("rounds", "first"),
                                                           score=("score", _mean)).reset_index()

    def summary(self) -> dict:
        """What a notebook's summary records of this tuning (its ``checks``, which the tests read back): the chosen
        setting, its grid and the edges it reached, the default, and both scores."""
        return {"value": self.setting, "grid": self.grid, "at_edge": self.at_edge, "default": self.default,
                "default_score": self.default_score, "score": self.score}

    def line(self) -> str:
        """``method: default ... score s0 -> tuned ... score s1`` (the report's "default vs best")."""
        edge = f" (at the edge of its grid: {', '.join(self.at_edge)})" if self.at_edge else ""
        return (f"{self.method}: default {format_setting(self.default)} scores {self.default_score:.4f}, tuned "
                f"{format_setting(self.setting)} scores {self.score:.4f}{edge}")


def format_setting(setting: dict) -> str:
    """``{"lr": 0.1, "mu": 0.01}`` -> ``"lr 0.1, mu 0.01"`` (the notebooks' and the report's way of naming one)."""
    return ", ".join(f"{k} {v:g}" for k, v in setting.items())


def rung_rounds(rounds: int, eval_every: int, rungs: int, eta: int) -> list[int]:
    """The rounds of each rung: ``rounds / eta^k`` for ``k = rungs-1 .. 0``, rounded up to a multiple of
    ``eval_every`` (and at most ``rounds``), without repeats: ``rung_rounds(30, 5, 3, 3) == [5, 10, 30]``."""
    out = []
    for k in range(rungs - 1, -1, -1):
        r = min(rounds, math.ceil(rounds / eta ** k / eval_every) * eval_every)
        if r not in out:
            out.append(r)
    return out


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


def _mean(s: pd.Series) -> float:
    return float(s.mean()) if np.isfinite(s).all() else -np.inf


class _Method:
    """One method's state through the rungs: its grid, every run's row, and the settings still in the race."""

    def __init__(self, name: str, spec: Spec, grid: dict[str, list[float]]):
        self.name, self.spec, self.grid, self.rows = name, spec, grid, []
        self.names = list(grid)
        self.default = tuple(spec.default[n] for n in self.names)

    def key(self, setting: tuple) -> tuple:
        return _distance(dict(zip(self.names, setting)), self.spec.default), setting

    def diverged(self, setting: tuple) -> bool:
        return any(not r["ok"] for r in self.rows if r["setting"] == setting)

    def larger_neighbours(self, setting: tuple) -> list[tuple]:
        """The settings one grid step larger in one step size (``spec.steps``): those the stability rule looks at."""
        out = []
        for n in self.spec.step_names():
            i, values = self.names.index(n), self.grid[n]
            j = values.index(setting[i]) + 1
            if j < len(values):
                out.append((*setting[:i], values[j], *setting[i + 1:]))
        return out

    def ran(self, setting: tuple, rounds: int) -> bool:
        return any(r["setting"] == setting and r["rounds"] == rounds for r in self.rows)

    def eligible(self, setting: tuple) -> bool:
        """Finite on every seed so far, and (except for the default) no larger-step neighbour diverged (the stability
        rule)."""
        if self.diverged(setting):
            return False
        return setting == self.default or not any(self.diverged(n) for n in self.larger_neighbours(setting))

    def ranked(self, rounds: int) -> list[tuple]:
        """The settings run at ``rounds``, eligible ones only, best mean score first (ties: nearest the default)."""
        mean = {}
        for r in self.rows:
            if r["rounds"] == rounds:
                mean.setdefault(r["setting"], []).append(r["score"])
        ok = [s for s, v in mean.items() if self.eligible(s) and np.isfinite(v).all()]
        return sorted(ok, key=lambda s: (-float(np.mean(mean[s])), *self.key(s)))

    def score(self, setting: tuple, rounds: int) -> float:
        return _mean(pd.Series([r["score"] for r in self.rows if r["setting"] == setting and r["rounds"] == rounds]))


def _run(methods: dict[str, _Method], wanted: dict[str, list[tuple]], rounds: int, seeds, score, results, jobs,
         refresh) -> None:
    """Run every method's ``wanted`` settings on every seed at ``rounds`` (one sweep: one process pool) and append
    one row per run to the method."""
    configs, keys = [], []
    for m, settings in wanted.items():
        for setting in settings:
            for seed in seeds:
                full = methods[m].spec.make(dict(zip(methods[m].names, setting)), seed)
                configs.append(dataclasses.replace(full, rounds=rounds))
                keys.append((m, setting, seed))
    if not configs:
        return
    frame = sweep(configs, results, jobs=jobs, refresh=refresh)
    runs = frame.attrs["runs"].set_index("hash")
    per_run = score(frame) if len(frame) else pd.Series(dtype=float)
    rows = []
    for c, (m, setting, seed) in zip(configs, keys):
        h = c.hash()
        ok = runs.loc[h, "status"] == "ok"
        rows.append((m, {"setting": setting, "seed": seed, "rounds": rounds, "ok": ok,
                         "score": float(per_run.get(h, np.nan)) if ok else -np.inf,
                         "round": runs.loc[h, "diverged_round"], "label": c.label}))
    unscored = [r for _, r in rows if r["ok"] and np.isnan(r["score"])]
    if unscored and len(unscored) == sum(r["ok"] for _, r in rows):  # no finished run scored: not a divergence
        recorded = sorted(frame.metric.unique()) if len(frame) else []
        raise ConfigError(f"the tuning score gives no value for {len(unscored)} finished run(s) (e.g. "
                          f"{unscored[0]['label']!r}): does it name a metric and a round the runs record? "
                          f"They record {recorded}")
    for m, row in rows:
        methods[m].rows.append(row)


def tune(specs: dict[str, Spec], seeds: list[int], score: Callable[[pd.DataFrame], pd.Series], results,
         *, evaluation_seeds, jobs: int = 1, refresh: bool = False, margin: float = 0.0, extend: int = 6,
         rungs: int = 3, eta: int = 3) -> dict[str, Tuned]:
    """Tune every method of ``specs`` by the protocol above; ``score(frame)`` maps a sweep's frame to one score
    per run hash (larger is better). Each rung's runs of all methods go to one sweep (one process pool)."""
    if not specs:
        raise ConfigError("tune needs at least one method to tune (specs is empty)")
    seeds = list(check_seeds("tuning seeds", seeds, least=2))
    evaluation = check_seeds("evaluation seeds", evaluation_seeds, least=1)
    if set(seeds) & set(evaluation):
        raise ConfigError(f"tuning seeds {seeds} overlap the evaluation seeds {list(evaluation)} at "
                          f"{sorted(set(seeds) & set(evaluation))}: tune on seeds the evaluation never uses")
    check_number("margin", margin, low=0.0)
    check_number("extend", extend, low=0, integer=True)
    check_number("rungs", rungs, low=1, integer=True)
    check_number("eta", eta, low=2, integer=True)
    methods = {}
    for m, s in specs.items():
        grid = {k: check_grid(f"{m} {k}", v) for k, v in s.grid.items()}
        missing = [k for k in s.grid if s.default.get(k) not in grid[k]]
        if missing:
            raise ConfigError(f"{m}: the default of {missing} is not in its grid")
        unknown = [n for n in s.step_names() if n not in grid]
        if unknown:
            raise ConfigError(f"{m}: the step sizes {unknown} are not tuned (the grid has {list(grid)})")
        methods[m] = _Method(m, s, grid)
    horizon = {m: s.make(dict(s.default), seeds[0]) for m, s in specs.items()}
    ladders = {m: rung_rounds(c.rounds, c.eval_every, rungs, eta) for m, c in horizon.items()}
    alive = {m: list(itertools.product(*(methods[m].grid[n] for n in methods[m].names))) for m in methods}
    full_grid = {m: len(alive[m]) * len(seeds) * horizon[m].rounds for m in methods}
    for level in range(max(len(ladder) for ladder in ladders.values())):
        wanted = {}
        for m, ladder in ladders.items():
            k = level - (max(map(len, ladders.values())) - len(ladder))  # short ladders join at their first rung
            if k < 0:
                continue
            if k > 0:
                ranked = methods[m].ranked(ladder[k - 1])
                keep = ranked[:max(1, math.ceil(len(alive[m]) / eta))]
                if k == len(ladder) - 1 and methods[m].default not in keep and not methods[m].diverged(
                        methods[m].default):
                    keep.append(methods[m].default)
                alive[m] = keep
            wanted.setdefault(ladder[k], {})[m] = alive[m]
        for rounds, part in wanted.items():
            _run(methods, part, rounds, seeds, score, results, jobs, refresh)
    done, extended = {}, dict.fromkeys(methods, 0)
    while len(done) < len(methods):  # ends: each pass extends (at most ``extend`` times), promotes or chooses
        todo = {}
        for m, state in methods.items():
            if m in done:
                continue
            last = ladders[m][-1]
            ranked = state.ranked(last)
            if not ranked:  # every finalist diverged or borders a divergence: promote the rung before's next best
                before = state.ranked(ladders[m][-2]) if len(ladders[m]) > 1 else []
                more = [s for s in before if not any(r["setting"] == s and r["rounds"] == last for r in state.rows)]
                if not more:
                    raise RuntimeError(f"{m}: every tuning setting diverged on some seed or borders a divergence; "
                                       f"widen the grid towards smaller steps")
                todo[m] = more[:1]
                continue
            best = state.score(ranked[0], last)
            chosen = min((s for s in ranked if state.score(s, last) >= best - margin), key=state.key)
            if state.default in ranked and state.score(state.default, last) > state.score(chosen, last):
                chosen = state.default  # never below the default (a tie within margin went to a farther setting)
            unseen = [] if chosen == state.default else [n for n in state.larger_neighbours(chosen)
                                                          if not state.ran(n, last) and not state.diverged(n)]
            if unseen:  # the stability rule at the full horizon: a neighbour halving stopped early may diverge late
                todo[m] = unseen
                continue
            grid = state.grid
            edges = {n: (-1 if v == grid[n][0] else 1) for n, v in zip(state.names, chosen)
                     if len(grid[n]) > 2 and v in (grid[n][0], grid[n][-1])}
            if edges and extended[m] < extend:
                extended[m] += 1
                todo[m] = []
                for n, side in edges.items():
                    grid[n] = _extend(grid[n], side, state.spec.default[n])
                    i = state.names.index(n)
                    todo[m].append((*chosen[:i], grid[n][0 if side < 0 else -1], *chosen[i + 1:]))
                continue
            done[m] = _tuned(state, chosen, last, sorted(edges), full_grid[m])
        by_rounds: dict[int, dict] = {}
        for m, settings in todo.items():
            by_rounds.setdefault(ladders[m][-1], {})[m] = settings
        for rounds, part in by_rounds.items():
            _run(methods, part, rounds, seeds, score, results, jobs, refresh)
    return {m: done[m] for m in specs}


def _tuned(state: _Method, chosen: tuple, last: int, at_edge: list[str], full_grid: int) -> Tuned:
    table = pd.DataFrame([{**dict(zip(state.names, r["setting"])), **{k: v for k, v in r.items() if k != "setting"},
                           "method": state.name} for r in state.rows])
    diverged = [{"label": r["label"], "seed": int(r["seed"]), "round": None if pd.isna(r["round"]) else
                 int(r["round"]), "role": "tuning", "setting": dict(zip(state.names, map(float, r["setting"])))}
                for r in state.rows if not r["ok"]]
    default = state.score(state.default, last) if not state.diverged(state.default) else -np.inf
    if state.score(chosen, last) < default:
        raise RuntimeError(f"{state.name}: the tuned choice {dict(zip(state.names, chosen))} scores below the "
                           f"default {state.spec.default} at the full horizon: the protocol never reports that")
    return Tuned(state.name, dict(zip(state.names, map(float, chosen))), state.score(chosen, last),
                 dict(state.spec.default), float(default), {n: list(v) for n, v in state.grid.items()}, at_edge,
                 table, diverged, full_grid)


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
