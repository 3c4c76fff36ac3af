"""The verdict rule: how a claim's measured evidence becomes its word. No verdict word is written by hand.

A claim declares its evidence, each item one setting and one question:

* :func:`paired`: method against baseline on the same seeds (the same data split, sampling and initial model), a
  metric and the direction the claim states. The per-seed differences are signed so that a positive effect is
  the claimed direction: ``d_s = sign * (method_s - baseline_s)``, ``sign = +1`` if higher is better, ``-1`` if
  lower is better.
* :func:`against`: one method's per-seed values against a fixed threshold (``d_s = sign * (value_s - reference)``),
  e.g. a variance ratio against 1; or one exact value (``deterministic``: a computation with no seed).
* :func:`identity`: an exact identity checked to a tolerance (``|deviation| <= tolerance``).
* :func:`untestable`: a statement this machine cannot test, with the reason.

A run that diverged is stored as the worst value (``-inf`` where higher is better, ``+inf`` where lower is). It is
an outcome of its own, never a number in a mean: the effect and its interval are over the seeds both sides
finished, and the item says how many seeds diverged on each side. The item's word (``reproduces``, ``tie``, ``does
not reproduce``):

* **paired, no divergence**: the 95% Student-t interval of ``mean_s d_s``: above 0: ``reproduces``; containing 0:
  ``tie``; below 0: ``does not reproduce``. A **not worse** item (e.g. "with equivalent fairness") declares a
  non-inferiority margin ``delta`` in the metric's units: it reproduces when the interval lies above ``-delta``,
  does not when it lies below ``-delta``, and is a tie otherwise (a tie is no free pass).
* **paired, a seed diverged on one side only**: the exact two-sided sign test over the seeds compared, each seed a
  win (``d_s > 0``, or only the baseline diverged) or a loss (``d_s < 0``, or only the method diverged); a seed on
  which both diverged compares nothing. Significant wins: ``reproduces``; significant losses: ``does not
  reproduce``; else ``tie``. (At 5 seeds no sign test reaches 95%: a divergence makes the item a tie at best; its
  count is reported.)
* **against, seeded (a threshold)**: judged seed by seed; each seed passes (``d_s > 0``) or fails (``d_s <= 0``, or
  the run diverged). It reproduces when at least the declared ``share`` of the seeds pass (all of them by default),
  does not when at least that share fail, and is a tie when the seeds split.
* **against, deterministic**: the one exact value against the reference.
* one seed, not deterministic: a tie (nothing can be told apart).

At the paper profile a paired item, and every seeded item of a performance claim, has at least ``MIN_SEEDS``
(8) evaluation seeds: the sign test then reaches p = 0.0078 when one side diverges on every seed, where at 5
seeds its smallest p is 0.0625. Any other seeded measurement (a draw of the data, a trajectory) has at least
``MIN_DRAWS`` (5) draws, and a CPU time as many interleaved repeats, each judged as a seed; ``deterministic``
is one exact computation, never a seeded draw or a timing.

How a claim's items combine into its word (Holm's adjustment, controls): :mod:`fedcompanion.reproduction.rule.claim`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

VERDICTS = ("reproduces", "holds (our reconstruction)", "partly", "mixed", "equivalent", "inconclusive",
            "does not reproduce", "not testable here")  # a claim's words (fedcompanion.reproduction.rule.claim)
LEVEL = 0.95
MIN_SEEDS = 8  # evaluation seeds of every paired item and every seeded item of a performance claim (paper profile)
MIN_DRAWS = 5  # draws of any other seeded measurement, and interleaved repeats of a CPU time


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
            diverged is stored as the worst value (``-inf`` where higher is better, ``+inf`` where lower is); a
            missing run as NaN.
        seeds: the evaluation seeds, paired with ``values``.
        holds_if: ``better`` (the claim says better) or ``not worse`` (equivalent or better, within ``margin``).
        tolerance: an identity's tolerance.
        deterministic: a single exact value (no seed to average over).
        reason: why it is not testable.
        margin: a ``not worse`` item's non-inferiority margin, in the metric's units (required there).
        share: a seeded ``against`` item's share of seeds that must pass (default: all).
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
    margin: float | None = None
    share: float = 1.0

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
        if self.holds_if == "not worse" and (self.kind != "paired" or self.margin is None or not self.margin >= 0):
            raise ValueError(f"not-worse evidence {self.question!r} needs paired values and a declared "
                             f"non-inferiority margin >= 0 in the metric's units, got margin={self.margin!r}")
        if self.holds_if == "better" and self.margin is not None:
            raise ValueError(f"evidence {self.question!r}: a margin belongs to a not-worse item only")
        if self.deterministic and (self.kind != "against" or len(self.values) != 1):
            raise ValueError(f"deterministic evidence {self.question!r} is one exact value against a reference, got "
                             f"{len(self.values)} {self.kind} value(s): several values are seeds or repeats, judged "
                             "over all of them (deterministic=False)")
        if not 0 < self.share <= 1:
            raise ValueError(f"evidence {self.question!r}: share must be in (0, 1], got {self.share!r}")

    # ------------------------------------------------------------------------------------------ seeds and outcomes
    def _sides(self) -> list[tuple[int, float, float]]:
        """(seed, method, baseline-or-reference) per seed."""
        seeds = self.seeds or tuple(range(len(self.values)))
        if self.kind == "paired":
            return list(zip(seeds, self.values, self.baseline))
        if self.kind == "against":
            return [(s, v, self.baseline[0]) for s, v in zip(seeds, self.values)]
        return []

    @property
    def differences(self) -> list[float]:
        """``d_s`` over the seeds both sides finished: positive where the claimed direction holds."""
        sign = 1.0 if self.better == "higher" else -1.0
        return [sign * (v - b) for _, v, b in self._sides() if math.isfinite(v) and math.isfinite(b)]

    @property
    def diverged(self) -> dict[str, list[int]]:
        """The seeds on which only the method, only the baseline, or both diverged (a missing run, NaN, is none)."""
        out: dict[str, list[int]] = {"method": [], "baseline": [], "both": []}
        for s, v, b in self._sides():
            m, r = math.isinf(v), math.isinf(b)
            if m or r:
                out["both" if m and r else "method" if m else "baseline"].append(s)
        return out

    @property
    def both_diverged(self) -> list[int]:
        """The seeds on which the method and the baseline both diverged: no comparison there."""
        return self.diverged["both"]

    @property
    def missing(self) -> bool:
        """A run is missing (NaN): the claim was not shown to hold there."""
        return any(math.isnan(v) or math.isnan(b) for _, v, b in self._sides())

    @property
    def n(self) -> int:
        """The seeds compared (0 for an identity or an untestable item; a seed on which both sides diverged is not
        counted)."""
        return len(self._sides()) - len(self.both_diverged) if self.kind in ("paired", "against") else 0

    @property
    def test(self) -> str:
        """How the item is decided: ``identity``, ``untestable``, ``exact`` (one deterministic value), ``one seed``,
        ``threshold`` (seed by seed), ``sign`` (a seed diverged on one side) or ``t``."""
        if self.kind in ("identity", "untestable"):
            return self.kind
        if self.deterministic:
            return "exact"
        if self.kind == "against":
            return "threshold"
        if self.n < 2:
            return "one seed"
        return "sign" if self.diverged["method"] or self.diverged["baseline"] else "t"

    def stats(self) -> dict:
        """``effect`` (mean of ``d_s`` over the seeds both finished), ``low``/``high`` (its 95% t interval), ``p``
        (the p-value the word rests on: the t-test of a mean of 0, or of ``-margin`` for a not-worse item; the sign
        test; NaN where no test decides), ``n``, ``wins``/``losses`` (sign test), ``passes`` (threshold), and
        ``relative`` (the effect over the baseline's mean magnitude: the forest plot's scale)."""
        if self.kind not in ("paired", "against"):
            return {}
        d = self.differences
        finite_base = [b for _, _, b in self._sides() if math.isfinite(b)]
        scale = abs(sum(finite_base) / len(finite_base)) if finite_base else 0.0
        out = {"n": self.n, "p": math.nan, "effect": math.nan, "low": math.nan, "high": math.nan}
        if d:
            mean = sum(d) / len(d)
            out.update(effect=mean, low=mean, high=mean)
            if len(d) >= 2 and not self.deterministic:
                _, low, high, _ = t_interval(d)
                out.update(low=low, high=high)
            elif not self.deterministic:
                out.update(low=-math.inf, high=math.inf)
        test = self.test
        if test == "t":
            out["p"] = _t_p(d, -(self.margin or 0.0))
        elif test == "sign":
            wins = sum(x > 0 for x in d) + len(self.diverged["baseline"])
            losses = sum(x < 0 for x in d) + len(self.diverged["method"])
            out.update(wins=wins, losses=losses, p=sign_test(wins, losses))
        elif test == "threshold":
            out["passes"] = sum(x > 0 for x in d)
        for key in ("effect", "low", "high"):
            out[f"relative{'' if key == 'effect' else '_' + key}"] = out[key] / scale if scale > 0 else math.nan
        return out

    # ------------------------------------------------------------------------------------------------ the word
    def word(self) -> str:
        """This item's word on its own (before a claim's multiplicity adjustment, :func:`words`): ``reproduces``,
        ``tie``, ``does not reproduce`` or ``not testable here``."""
        if self.kind == "untestable":
            return "not testable here"
        if self.kind == "identity":
            return "reproduces" if abs(self.values[0]) <= self.tolerance else "does not reproduce"
        if self.missing:
            return "does not reproduce"  # a missing run: the claim was not shown to hold there
        s, test = self.stats(), self.test
        if self.n == 0:
            return "tie"  # both sides diverged on every seed: nothing was compared
        if test == "threshold":
            need = math.ceil(self.share * self.n - 1e-9)
            passes = s["passes"]
            return "reproduces" if passes >= need else "does not reproduce" if self.n - passes >= need else "tie"
        if test == "one seed":
            return "tie"
        if test == "sign":
            if s["p"] < 1 - LEVEL:
                return "reproduces" if s["wins"] > s["losses"] else "does not reproduce"
            return "tie"
        floor = -(self.margin or 0.0)
        if s["low"] > floor:
            return "reproduces"
        if s["high"] < floor:
            return "does not reproduce"
        return "tie"

    def holds(self) -> bool:
        """Whether this item, on its own, supports the claim (:func:`words` adjusts a claim's items together)."""
        return self.word() == "reproduces"

    def describe(self) -> str:
        """One line in the metric's own units and direction: for a paired item the difference method - baseline
        with its 95% interval (negative is the claimed direction where lower is better), for a threshold item the
        seeds' values against the threshold; how many seeds were compared (n counts seeds), diverged, passed or
        won, and the p-value the word rests on; an identity's deviation and tolerance."""
        if self.kind == "untestable":
            return f"{self.setting}: {self.question}: not testable ({self.reason})"
        if self.kind == "identity":
            return (f"{self.setting}: {self.question}: deviation {abs(self.values[0]):.1e} "
                    f"(tolerance {self.tolerance:.0e})")
        s, test = self.stats(), self.test
        direction = f"{self.better} is better" + (f"; not worse by more than {self.margin:g} suffices"
                                                  if self.holds_if == "not worse" else "")
        head = f"{self.setting}: {self.question}"
        finite = [v for _, v, _ in self._sides() if math.isfinite(v)]
        sign = 1.0 if self.better == "higher" else -1.0
        if self.kind == "against":
            reference = f"threshold {self.baseline[0]:.3g}"
            if test == "exact":
                return f"{head}: {self.metric} {_v(self.values[0])} against the {reference} ({direction})"
            values = (f" {_v(sum(finite) / len(finite))} on average, from {_v(min(finite))} to {_v(max(finite))}"
                      if finite else ": no seed finished")
            parts = [f"{s['passes']} of {self.n} seeds pass" + (f" (share {self.share:g} needed)"
                                                               if self.share < 1 else "")]
        else:
            if test == "exact":
                return f"{head}: {self.metric}, method - baseline {_g(sign * s['effect'])} ({direction})"
            low, high = sorted((sign * s["low"], sign * s["high"]))
            finished = len(self.differences)
            values = (": no seed finished on both sides" if not finished else
                      f", method - baseline {_g(sign * s['effect'])} [{_g(low)}, {_g(high)}]"
                      + (f", p = {_p(s['p'])}" if test == "t" else "")
                      + (f", n = {finished} seeds" if finished == self.n
                         else f" over the {finished} of {self.n} seeds both finished"))
            parts = []
            if test == "sign":
                parts.append(f"sign test {s['wins']} wins, {s['losses']} losses, p = {_p(s['p'])}")
        div = self.diverged
        parts = [f"the {who} diverged on {len(div[who])} of {self.n} seeds" for who in ("method", "baseline")
                 if div[who]] + parts
        if div["both"]:
            parts.insert(0, f"both diverged on seed{'s' if len(div['both']) > 1 else ''} "
                            f"{', '.join(map(str, div['both']))}")
        if self.n == 0:
            return f"{head}: nothing compared; " + "; ".join(parts)
        against = f" against the {reference}" if self.kind == "against" else ""
        return f"{head}: {self.metric}{values}{against} ({direction})" + "".join(f"; {x}" for x in parts)


@functools.cache
def t_quantile(q: float, df: int) -> float:
    """Student's t quantile ``q`` with ``df`` degrees of freedom (``scipy.special.stdtrit``, what ``stats.t.ppf``
    computes, without its argument checking: the verdict rule asks for a handful of them thousands of times)."""
    from scipy import special

    return float(special.stdtrit(df, q))


def t_interval(values) -> tuple[float, float, float, float]:
    r"""(mean, low, high, p) of two or more values: the mean with its 95% Student-t interval, and the two-sided
    one-sample t-test's p for a mean of 0, :math:`2\,P(T_{n-1} > |\bar d| / (s/\sqrt n))` (what every seeded item,
    and every interval a figure draws, uses). Computed directly, from the same mean and standard deviation as the
    interval: the p is below 1 - LEVEL exactly when the interval excludes 0."""
    from scipy import special

    d = [float(x) for x in values]
    n = len(d)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 values, got {n}")
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    half = t_quantile(0.5 + LEVEL / 2, n - 1) * se
    if sd > 0:
        p = float(2 * special.stdtr(n - 1, -abs(mean) / se))
    else:  # every value equal: a mean of 0 is certain or excluded
        p = 0.0 if mean != 0 else 1.0
    return mean, mean - half, mean + half, p


def _t_p(d: list[float], mu: float) -> float:
    """The two-sided one-sample t-test's p for a mean of ``mu`` (its interval excludes ``mu`` exactly when
    p < 1 - LEVEL)."""
    return t_interval([x - mu for x in d])[3]


def sign_test(wins: int, losses: int) -> float:
    """The exact two-sided sign test's p: ``wins`` against ``losses`` (ties dropped) under a fair coin."""
    from scipy import stats

    return float(stats.binomtest(wins, wins + losses).pvalue) if wins + losses else 1.0


def _g(x: float) -> str:
    return f"{x:+.3g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf" if x < 0 else "nan")


def _v(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf" if x < 0 else "nan")


def _p(p: float) -> str:
    return "nan" if not math.isfinite(p) else (f"{p:.1e}" if p < 1e-3 else f"{p:.3f}")


def paired(setting: str, question: str, metric: str, better: str, values, baseline, seeds,
           holds_if: str = "better", margin: float | None = None) -> Evidence:
    """Method against baseline, seed by seed (``values[i]`` and ``baseline[i]`` share ``seeds[i]``); a not-worse
    item declares its ``margin`` in the metric's units."""
    return Evidence("paired", setting, question, metric, better, tuple(values), tuple(baseline), tuple(seeds),
                    holds_if, margin=margin)


def against(setting: str, question: str, metric: str, better: str, values, reference: float, seeds=(),
            deterministic: bool = False, share: float = 1.0) -> Evidence:
    """Per-seed values against a fixed threshold, judged seed by seed (``share``: of the seeds that must pass), or
    one exact value (``deterministic``)."""
    return Evidence("against", setting, question, metric, better, tuple(values), (float(reference),), tuple(seeds),
                    deterministic=deterministic, share=share)


def identity(setting: str, question: str, deviation: float, tolerance: float) -> Evidence:
    """An exact identity checked to a tolerance: it holds when ``abs(deviation) <= tolerance``."""
    return Evidence("identity", setting, question, values=(float(deviation),), tolerance=float(tolerance))


def untestable(setting: str, question: str, reason: str) -> Evidence:
    """A statement this machine cannot test, with the reason."""
    return Evidence("untestable", setting, question, reason=reason)


def from_dict(d: dict) -> Evidence:
    """An Evidence from its stored dict (a summary's JSON)."""
    return Evidence(**d)
