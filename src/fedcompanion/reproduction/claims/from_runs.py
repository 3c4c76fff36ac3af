"""The evidence the verdict rule reads from runs: paired items from per-run tables, and their controls (the baseline
stopped at half its rounds in the method's place: the directional control; the initial model: a sanity line)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..rule.item import paired


def per_seed_evidence(table: pd.DataFrame, column: str, method: str, baseline: str, better: str, setting: str,
                      question: str | None = None, holds_if: str = "better", seeds: list[int] | None = None,
                      margin: float | None = None):
    """Paired :class:`~fedcompanion.reproduction.rule.item.Evidence` from a per-run table indexed by ``(label, seed)``:
    ``method`` against ``baseline`` in ``column`` on the seeds both ran (``seeds``: all of the table's). A run
    missing from the table (it diverged) enters as the worst value, ``-inf`` if higher is better else ``+inf``; a
    not-worse item declares its non-inferiority ``margin`` in the column's units."""
    values = table[column]
    seeds = sorted(set(values.index.get_level_values("seed"))) if seeds is None else list(seeds)
    worst = -np.inf if better == "higher" else np.inf

    def column_of(label):
        return [float(values.get((label, s), worst)) if np.isfinite(values.get((label, s), np.nan)) else worst
                for s in seeds]
    return paired(setting, question or f"{method} vs {baseline}", column, better, column_of(method),
                  column_of(baseline), seeds, holds_if, margin)


def round_zero(frame: pd.DataFrame) -> pd.DataFrame:
    """The global metrics at round 0 (the initial model, evaluated before any training), as (label, seed) x
    metric: the table :func:`initial_values` reads."""
    rows = frame[(frame.client == -1) & (frame["round"] == 0)]
    return rows.pivot_table(index=["label", "seed"], columns="metric", values="value", aggfunc="first")


def initial_values(table: pd.DataFrame, column: str, labels: list[str], seeds: list[int],
                   rtol: float = 1e-5) -> list[float]:
    """Per seed, ``column`` for the initial model, from the rows of ``labels`` in a (label, seed) table (e.g.
    :func:`round_zero`). A seed fixes the initial model, so those rows must agree (to ``rtol``: the runs may come
    from machines whose float32 last bits differ); a ``ValueError`` names the seed where they do not."""
    out = []
    for s in seeds:
        seen = [float(table.loc[(label, s), column]) for label in labels]
        if not np.allclose(seen, seen[0], rtol=rtol, atol=0):
            raise ValueError(f"{column} at round 0, seed {s}: {dict(zip(labels, seen))} differ, so the runs did "
                             "not start from one initial model")
        out.append(seen[0])
    return out


def untrained_control(item, initial: list[float], method: str):
    """The control of a paired item "``method`` is better than the baseline": the same test with ``method``'s values
    replaced by the initial model's (``initial``, on the item's seeds), i.e. a method that does not train. Its
    metric stays at round 0's value, so its mean over the rounds and its last value are both round 0's. The test is
    the item's own (a not-worse item keeps its margin). A test that does not reject it (``does not reproduce``)
    cannot tell training from none."""
    if item.kind != "paired" or len(initial) != len(item.values):
        raise ValueError(f"untrained_control needs a paired item and one initial value per seed, got {item.kind!r} "
                         f"with {len(item.values)} seeds and {len(initial)} initial values")
    untrained = "the initial model (no training)"
    question = (item.question.replace(method, untrained, 1) if method in item.question
                else f"{untrained} in place of {method}: {item.question}")
    return dataclasses.replace(item, question=question, values=tuple(initial))


def early_values(frame: pd.DataFrame, metric: str, label: str, seeds, better: str, fraction: float = 0.5,
                 reduce: Callable[[pd.Series], float] | None = None) -> list[float]:
    """Per seed, the global ``metric`` of ``label``'s run in a sweep frame, stopped at ``fraction`` of its rounds:
    its value at the last evaluated round at or before ``fraction * R`` (``R``: the run's last round), or
    ``reduce`` of its per-round series up to there (e.g. ``lambda s: s.mean()`` for a speed score read as a mean
    over the rounds). A run that did not finish (status other than ``ok``) is the worst value for ``better``."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
    worst = -math.inf if better == "higher" else math.inf
    rows = frame[(frame.metric == metric) & (frame.client == -1) & (frame.label == label)]
    out = []
    for s in seeds:
        run = rows[rows.seed == s]
        if run.empty:
            raise ValueError(f"no {metric!r} rows of {label!r} on seed {s} in the frame")
        if (run.status != "ok").any():
            out.append(worst)
            continue
        series = run.set_index("round").value.sort_index()
        early = series[series.index <= fraction * series.index.max()]
        value = float(reduce(early)) if reduce is not None else float(early.iloc[-1])
        out.append(value if math.isfinite(value) else worst)
    return out


def stopped_early(item, values: list[float], method: str, baseline: str, fraction: float = 0.5):
    """The directional control of a paired item "``method`` is better than ``baseline``": the same test with
    ``method``'s values replaced by ``baseline``'s own runs stopped at ``fraction`` of their rounds (``values``, on
    the item's seeds: :func:`early_values`). That is a method which trains, on the same seeds, and which the claim
    excludes (it is the baseline with half the budget), with an effect of a trained method's size rather than the
    untrained model's. The test is the item's own (a not-worse item keeps its margin); it must come out ``does not
    reproduce``, or the test cannot tell a method from the same method trained half as long."""
    if item.kind != "paired" or len(values) != len(item.values):
        raise ValueError(f"stopped_early needs a paired item and one value per seed, got {item.kind!r} with "
                         f"{len(item.values)} seeds and {len(values)} values")
    early = f"{baseline} stopped at {fraction:.0%} of its rounds"
    question = (item.question.replace(method, early, 1) if method in item.question
                else f"{early} in place of {method}: {item.question}")
    return dataclasses.replace(item, question=question, values=tuple(values))
