"""The verdict rule: how a claim's measured evidence becomes its word. No verdict word is written by hand.

A claim declares its evidence, each item one setting and one question:

* :func:`paired`: method against baseline on the same seeds (the same data split, sampling and initial model), a
  metric and the direction the claim states. The per-seed differences are signed so that a positive effect is
  the claimed direction: ``d_s = sign * (method_s - baseline_s)``, ``sign = +1`` if higher is better, ``-1`` if
  lower is better.
* :func:`against`: one method's per-seed values against a fixed reference (``d_s = sign * (value_s - reference)``),
  e.g. a variance ratio against 1.
* :func:`identity`: an exact identity checked to a tolerance (``|deviation| <= tolerance``).
* :func:`untestable`: a statement this machine cannot test, with the reason.

For the seeded items the effect is the mean difference ``d = mean_s d_s`` with a 95% Student-t interval
``d +- t_{0.975, n-1} * sd(d_s) / sqrt(n)`` and the paired two-sided t-test's p-value. The item's word:

* ``reproduces``: the interval lies above 0 (the effect is in the claimed direction);
* ``tie``: the interval contains 0 (the methods cannot be told apart on these seeds);
* ``does not reproduce``: the interval lies below 0 (significantly the other way).

A ``not worse`` item (e.g. "with equivalent fairness") holds unless it is significantly worse: ``tie`` counts as
holding there. A ``deterministic`` item (a computation with no seed, e.g. an iteration count on a fixed problem)
has one value and its interval is that value.

The claim's word combines its items: every item holds: ``reproduces``; none holds and at least one is reversed:
``does not reproduce``; none holds and none is reversed: ``tie``; some hold and some do not: ``partly``, with the
settings named in :func:`explain`. A reconstructed claim (the paper does not give the experiment) says ``holds (our
reconstruction)`` instead of ``reproduces``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

VERDICTS = ("reproduces", "partly", "tie", "does not reproduce", "not testable here", "holds (our reconstruction)")
LEVEL = 0.95
MIN_SEEDS = 5  # evaluation seeds a comparative claim needs at the paper profile


@dataclass(frozen=True)
class Evidence:
    """One setting's evidence for a claim (see the module docstring for the rule).

    Attributes:
        kind: ``paired``, ``against``, ``identity`` or ``untestable``.
        setting: where it was measured, in words (e.g. ``"B: 100 clients"``).
        question: what is compared, e.g. ``"AdaFedAdam vs FedAvg (paper, server lr 1)"``.
        metric: the measured quantity, e.g. ``"mean loss over rounds"``.
        better: ``higher`` or ``lower`` (seeded kinds).
        values, baseline: per-seed values of the method and of the baseline (``paired``); for ``against``,
            ``baseline`` holds the reference once; for ``identity``, ``values`` holds the deviation. A run that
            diverged is stored as the worst value (``-inf`` where higher is better, ``+inf`` where lower is):
            a seed where only the baseline diverged then counts for the method, and the reverse against it.
        seeds: the evaluation seeds, paired with ``values``.
        holds_if: ``better`` (the claim says better) or ``not worse`` (equivalent or better).
        tolerance: an identity's tolerance.
        deterministic: a single exact value (no seed to average over).
        reason: why it is not testable.
    """

    kind: str
    setting: str
    question: str
    metric: str = ""
    better: str = "higher"
    values: tuple[float, ...] = ()
    baseline: tuple[float, ...] = ()
    seeds: tuple[int, ...] = ()
    holds_if: str = "better"
    tolerance: float | None = None
    deterministic: bool = False
    reason: str = ""

    def __post_init__(self):
        if self.kind not in ("paired", "against", "identity", "untestable"):
            raise ValueError(f"Evidence kind must be paired, against, identity or untestable, got {self.kind!r}")
        if self.better not in ("higher", "lower"):
            raise ValueError(f"Evidence better must be 'higher' or 'lower', got {self.better!r}")
        if self.holds_if not in ("better", "not worse"):
            raise ValueError(f"Evidence holds_if must be 'better' or 'not worse', got {self.holds_if!r}")
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        object.__setattr__(self, "baseline", tuple(float(v) for v in self.baseline))
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if self.kind == "paired" and len(self.values) != len(self.baseline):
            raise ValueError(f"paired evidence {self.question!r}: {len(self.values)} values but "
                             f"{len(self.baseline)} baseline values")
        if self.kind in ("paired", "against") and not self.values:
            raise ValueError(f"evidence {self.question!r} has no values")
        if self.kind == "identity" and (self.tolerance is None or len(self.values) != 1):
            raise ValueError(f"identity {self.question!r} needs one deviation and a tolerance")
        if self.kind == "identity" and not self.tolerance >= 0:
            raise ValueError(f"identity {self.question!r}: the tolerance must be >= 0, got {self.tolerance}")

    @property
    def differences(self) -> list[float]:
        """``d_s``: positive where the claimed direction holds."""
        sign = 1.0 if self.better == "higher" else -1.0
        if self.kind == "paired":
            return [sign * (v - b) for v, b in zip(self.values, self.baseline)]
        if self.kind == "against":
            return [sign * (v - self.baseline[0]) for v in self.values]
        return []

    @property
    def n(self) -> int:
        """The number of seeds (0 for an identity or an untestable item)."""
        return len(self.values) if self.kind in ("paired", "against") else 0

    def stats(self) -> dict:
        """``effect`` (mean of ``d_s``), ``low``/``high`` (95% t interval), ``p`` (paired t-test), ``n``,
        ``relative`` (the effect over the baseline's mean magnitude: the forest plot's scale)."""
        d = self.differences
        n = len(d)
        if not n:
            return {}
        mean = sum(d) / n
        scale = abs(sum(self.baseline) / len(self.baseline)) if self.baseline else 0.0
        if any(not math.isfinite(x) for x in d):  # a diverged run (stored as the worst value) on one side
            total = math.nan if any(math.isnan(x) for x in d) else sum(d)
            return {"effect": total, "low": total, "high": total, "p": math.nan, "n": n, "relative": math.nan,
                    "relative_low": math.nan, "relative_high": math.nan}
        if self.deterministic or n == 1:
            low = high = mean
            p = 0.0 if mean != 0 else 1.0
            if n == 1 and not self.deterministic:  # one seed gives no interval: nothing can be told apart
                low, high, p = -math.inf, math.inf, math.nan
        else:
            _, low, high, p = t_interval(d)
        relative = mean / scale if scale > 0 else math.nan
        return {"effect": mean, "low": low, "high": high, "p": p, "n": n, "relative": relative,
                "relative_low": low / scale if scale > 0 else math.nan,
                "relative_high": high / scale if scale > 0 else math.nan}

    def word(self) -> str:
        """This item's word: ``reproduces``, ``tie``, ``does not reproduce`` or ``not testable here``."""
        if self.kind == "untestable":
            return "not testable here"
        if self.kind == "identity":
            return "reproduces" if abs(self.values[0]) <= self.tolerance else "does not reproduce"
        s = self.stats()
        if math.isnan(s["effect"]):
            return "does not reproduce"  # a missing run: the claim was not shown to hold there
        if s["low"] > 0:
            return "reproduces"
        if s["high"] < 0:
            return "does not reproduce"
        return "tie"

    def holds(self) -> bool:
        """Whether this item supports the claim: it reproduces, or it ties where not worse suffices."""
        w = self.word()
        return w == "reproduces" or (self.holds_if == "not worse" and w == "tie")

    def describe(self) -> str:
        """One line: the question, setting, effect, interval, p and n (or the deviation and tolerance)."""
        if self.kind == "untestable":
            return f"{self.setting}: {self.question}: not testable ({self.reason})"
        if self.kind == "identity":
            return (f"{self.setting}: {self.question}: deviation {abs(self.values[0]):.1e} "
                    f"(tolerance {self.tolerance:.0e})")
        s = self.stats()
        direction = f"{self.better} is better" + (", not worse suffices" if self.holds_if == "not worse" else "")
        if self.deterministic:
            return f"{self.setting}: {self.question}, {self.metric} ({direction}): effect {_g(s['effect'])} (exact)"
        return (f"{self.setting}: {self.question}, {self.metric} ({direction}): effect {_g(s['effect'])} "
                f"[{_g(s['low'])}, {_g(s['high'])}], p = {_p(s['p'])}, n = {s['n']}")


def t_interval(values) -> tuple[float, float, float, float]:
    """(mean, low, high, p) of two or more values: the mean with its 95% Student-t interval, and the t-test's p
    for a mean of 0 (what every seeded item, and every interval a figure draws, uses)."""
    from scipy import stats

    d = [float(x) for x in values]
    n = len(d)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 values, got {n}")
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1)) * sd / math.sqrt(n)
    p = float(stats.ttest_1samp(d, 0.0).pvalue) if sd > 0 else (0.0 if mean != 0 else 1.0)
    return mean, mean - half, mean + half, p


def _g(x: float) -> str:
    return f"{x:+.3g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf" if x < 0 else "nan")


def _p(p: float) -> str:
    return "nan" if not math.isfinite(p) else (f"{p:.1e}" if p < 1e-3 else f"{p:.3f}")


def paired(setting: str, question: str, metric: str, better: str, values, baseline, seeds,
           holds_if: str = "better") -> Evidence:
    """Method against baseline, seed by seed (``values[i]`` and ``baseline[i]`` share ``seeds[i]``)."""
    return Evidence("paired", setting, question, metric, better, tuple(values), tuple(baseline), tuple(seeds),
                    holds_if)


def against(setting: str, question: str, metric: str, better: str, values, reference: float, seeds=(),
            deterministic: bool = False) -> Evidence:
    """Per-seed values against a fixed reference (``deterministic``: one exact value)."""
    return Evidence("against", setting, question, metric, better, tuple(values), (float(reference),), tuple(seeds),
                    deterministic=deterministic)


def identity(setting: str, question: str, deviation: float, tolerance: float) -> Evidence:
    """An exact identity checked to a tolerance: it holds when ``abs(deviation) <= tolerance``."""
    return Evidence("identity", setting, question, values=(float(deviation),), tolerance=float(tolerance))


def untestable(setting: str, question: str, reason: str) -> Evidence:
    """A statement this machine cannot test, with the reason."""
    return Evidence("untestable", setting, question, reason=reason)


def decide(evidence: list[Evidence], reconstruction: bool = False) -> str:
    """The claim's word from its evidence (module docstring)."""
    if not evidence:
        raise ValueError("a claim needs evidence to be decided")
    testable = [e for e in evidence if e.kind != "untestable"]
    if not testable:
        return "not testable here"
    held = [e.holds() for e in testable]
    if all(held):
        return "holds (our reconstruction)" if reconstruction else "reproduces"
    if any(held):
        return "partly"
    return "does not reproduce" if any(e.word() == "does not reproduce" for e in testable) else "tie"


def explain(evidence: list[Evidence]) -> str:
    """Where the claim holds and where not (the ``partly`` verdict names them): ``all 6 items hold``, or the items
    grouped as ``holds: ...; tie: ...; reversed: ...; not testable: ...``."""
    groups: dict[str, list[str]] = {"holds": [], "tie": [], "reversed": [], "not testable": []}
    for e in evidence:
        where = f"{e.setting}: {e.question}"
        if e.kind == "untestable":
            groups["not testable"].append(where)
        elif e.holds():
            groups["holds"].append(where)
        elif e.word() == "tie":
            groups["tie"].append(where)
        else:
            groups["reversed"].append(where)
    used = {k: v for k, v in groups.items() if v}
    if len(used) == 1:
        (kind, items), = used.items()
        verb = {"holds": "hold", "tie": "are ties", "reversed": "are reversed", "not testable": "are not testable"}
        return f"{'the item' if len(items) == 1 else f'all {len(items)} items'} " + (
            {"holds": "holds", "tie": "is a tie", "reversed": "is reversed", "not testable": "is not testable"}[kind]
            if len(items) == 1 else verb[kind])
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in used.items())


def from_dict(d: dict) -> Evidence:
    """An Evidence from its stored dict (a summary's JSON)."""
    return Evidence(**d)
