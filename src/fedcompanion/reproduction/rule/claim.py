"""How a claim's items become its word (each item's own word: :mod:`fedcompanion.reproduction.rule.item`).

**Items.** An item decided by a p-value (t or sign test) keeps a significant word only if it survives Holm's
step-down procedure at 5% over the claim's items so decided (its adjusted p is printed beside the raw one). An item
that holds is ``reproduces``, one that goes the wrong way ``does not reproduce`` (reversed). An item that is neither
says which of two things it is: ``equivalent`` where a paired comparison's 90% interval lies inside the margin of
practical relevance declared for its metric (:mod:`fedcompanion.reproduction.papers`: two one-sided tests at 5%, the
methods are the same for any purpose), ``inconclusive`` otherwise (the runs cannot tell; each such t-tested item prints
the smallest effect its seeds could detect with 80% power).

**Claims.** Where the package declares which settings are the paper's own (the authors' experiment), the claim's
word comes from those items, and its other items are reported as "in our settings". Every item holds:
``reproduces`` (``holds (our reconstruction)`` where the experiment is ours); some hold and none is reversed:
``partly``; some hold and some are reversed: ``mixed`` (a claim with a reversed item is never "partly"); none holds
and one is reversed: ``does not reproduce``; none holds, none is reversed: ``equivalent`` if every item is, else
``inconclusive``. A claim may declare **controls**: its test applied to a method or setting the claim excludes;
every control must come out ``does not reproduce``, else the test cannot fail and the claim is ``not testable
here``. Every paired claim also carries **A/A controls** (:func:`same_method`): its test applied to its baseline
against itself on other seeds, which must not come out significant, else the test calls noise a difference and the
claim is ``not testable here`` too (enforced from 4 pairs, i.e. 8 evaluation seeds; below, the outcome is
shown). A claim's **fragility** is the fewest evaluation seeds whose removal would change its word (:func:`fragility`).
"""
from __future__ import annotations

import dataclasses
import itertools
import math

from ..papers import margin
from .item import LEVEL, Evidence, t_quantile

UNSETTLED = ("equivalent", "inconclusive")
POWER = 0.8  # the power at which an inconclusive item's detectable effect is stated


def relevance(e: Evidence) -> float | None:
    """The item's margin of practical relevance, in its metric's units: its own (a not-worse item's), else the one
    declared for its metric (``None``: none declared, so it can never be called equivalent)."""
    return e.margin if e.margin is not None else margin(e.metric)


def _spread(e: Evidence) -> tuple[float, float, int] | None:
    """(mean, standard deviation, n) of a t-tested item's differences."""
    d = e.differences
    if e.kind != "paired" or len(d) < 2 or e.deterministic:
        return None
    mean = sum(d) / len(d)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1)), len(d)


def equivalent(e: Evidence) -> bool:
    """Whether a paired item's 90% t interval lies inside +-its margin (:func:`relevance`): the two one-sided tests
    at 5% both reject a difference as large as the margin."""
    m, spread = relevance(e), _spread(e)
    if m is None or spread is None or e.test != "t":
        return False
    mean, sd, n = spread
    half = t_quantile(LEVEL, n - 1) * sd / math.sqrt(n)  # the 90% interval's half-width
    return -m < mean - half and mean + half < m


def detectable(e: Evidence) -> float | None:
    """The smallest true mean difference a paired t-tested item's seeds would detect at 5% with 80% power:
    ``(t_{0.975} + t_{0.8}) s / sqrt(n)`` (``None`` for other items)."""
    spread = _spread(e)
    if spread is None or e.test != "t":
        return None
    _, sd, n = spread
    return (t_quantile(0.5 + LEVEL / 2, n - 1) + t_quantile(POWER, n - 1)) * sd / math.sqrt(n)


def holm(evidence: list[Evidence]) -> list[float]:
    """Each item's Holm-adjusted p over the claim's items decided by a p-value (t or sign test; NaN for the others):
    the sorted p's ``p_(j)`` become ``max_{i <= j} (m - i + 1) p_(i)``, capped at 1."""
    p = [e.stats()["p"] if e.test in ("t", "sign") and not e.missing else math.nan for e in evidence]
    tested = sorted((p[i], i) for i in range(len(evidence)) if math.isfinite(p[i]))
    adjusted, running = [math.nan] * len(evidence), 0.0
    for k, (p_k, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - k) * p_k))
        adjusted[i] = running
    return adjusted


def words(evidence: list[Evidence]) -> list[str]:
    """Each item's word within its claim: ``reproduces``, ``does not reproduce``, ``equivalent``, ``inconclusive``
    or ``not testable here`` (the module docstring: Holm's adjustment, then equivalence for the unsettled)."""
    out = [e.word() for e in evidence]
    for i, p in enumerate(holm(evidence)):
        if out[i] in ("reproduces", "does not reproduce") and math.isfinite(p) and p > 1 - LEVEL:
            out[i] = "tie"
    return [("equivalent" if equivalent(e) else "inconclusive") if w == "tie" else w for w, e in zip(out, evidence)]


def notes(evidence: list[Evidence]) -> list[str]:
    """What each item's word rests on beyond its own line (:meth:`Evidence.describe`): Holm's adjusted p where the
    adjustment changed the word, the margin an equivalence or inconclusive item was held to, and the smallest effect
    an inconclusive item could detect."""
    out, adjusted = [], holm(evidence)
    tested = sum(map(math.isfinite, adjusted))
    for e, w, p in zip(evidence, words(evidence), adjusted):
        parts = []
        if w in UNSETTLED and e.word() != "tie":
            parts.append(f"Holm-adjusted p = {p:.3f} over the claim's {tested} tested items, above 0.05: not "
                         "significant")
        m, mde = relevance(e), detectable(e)
        if w == "equivalent":
            parts.append(f"the 90% interval lies within +-{m:g}, the margin of practical relevance")
        elif w == "inconclusive" and m is not None and e.kind == "paired":
            parts.append(f"the interval reaches beyond +-{m:g}, the margin of practical relevance")
        if w == "inconclusive" and mde is not None:
            parts.append(f"the smallest effect {e.n} seeds detect (80% power) is {mde:.3g}")
        out.append("; ".join(parts))
    return out


def control_outcomes(controls: list[Evidence]) -> list[tuple[str, Evidence]]:
    """Each control with its outcome, from its word among the controls (:func:`words`): ``rejected`` (``does not
    reproduce``: the test can fail), else ``<word>, not rejected`` (the test cannot tell the control from the
    claim)."""
    return [("rejected" if w == "does not reproduce" else f"{w}, not rejected", e)
            for w, e in zip(words(list(controls)), controls)]


def rejected(controls: list[Evidence]) -> bool:
    """Whether every control (the claim's test applied to a method or setting the claim excludes) comes out "does
    not reproduce": only then can the test fail, and so count as evidence."""
    return all(w == "does not reproduce" for w in words(list(controls)))


def same_method(evidence: list[Evidence]) -> list[Evidence]:
    """The A/A controls of a claim: each paired "better" item's test applied to its baseline against itself, the
    first half of its evaluation seeds against the second (seed ``s_k`` against ``s_{h+k}``: one configuration on
    other seeds, so no true difference). Each must come out equivalent or inconclusive; a significant word in either
    direction means the test calls noise a difference (:func:`decide`: ``not testable here``). Fewer than 4 seeds:
    none."""
    out = []
    for e in evidence:
        seeds = e.seeds or tuple(range(len(e.values)))
        h = len(seeds) // 2
        if e.kind != "paired" or e.holds_if != "better" or h < 2:
            continue
        out.append(dataclasses.replace(e, question=f"A/A: the baseline of {e.question}, seeds {list(seeds[:h])} "
                                                   f"against seeds {list(seeds[h:2 * h])}",
                                       values=e.baseline[:h], baseline=e.baseline[h:2 * h], seeds=seeds[:h]))
    return out


AA_PAIRS = 4  # an A/A control is enforced from 4 pairs (8 evaluation seeds); below, its outcome is shown only


def same_outcomes(evidence: list[Evidence]) -> list[tuple[str, Evidence]]:
    """Each A/A control (:func:`same_method`) with its outcome after Holm's adjustment over them: ``not
    significant`` (equivalent or inconclusive, as it must be), ``significant`` (the test calls noise a difference),
    or, with fewer than ``AA_PAIRS`` pairs (a t-test with 1 to 2 degrees of freedom), ``significant at n = k, not
    enforced``."""
    same = same_method(evidence)
    out = []
    for w, e in zip(words(same), same):
        if w not in ("reproduces", "does not reproduce"):
            out.append((f"not significant: {w}", e))
        else:
            out.append(("significant" if e.n >= AA_PAIRS else f"significant at n = {e.n}, not enforced below "
                        f"{AA_PAIRS} pairs", e))
    return out


def false_positive(evidence: list[Evidence]) -> bool:
    """Whether a claim's test calls a method different from itself: an enforced A/A control (:func:`same_outcomes`)
    comes out significant, in either direction."""
    return any(outcome == "significant" for outcome, _ in same_outcomes(evidence))


def split(evidence: list[Evidence], own=None) -> tuple[list[int], list[int]]:
    """The indices of the items that decide the claim's word (the paper's own settings, where ``own(setting)`` is
    given and some item is one) and of the others (ours)."""
    testable = [i for i, e in enumerate(evidence) if e.kind != "untestable"]
    deciding = [i for i in testable if own is None or own(evidence[i].setting)]
    if not deciding:
        deciding = testable
    return deciding, [i for i in testable if i not in deciding]


def decide(evidence: list[Evidence], reconstruction: bool = False, controls: list[Evidence] = (), own=None) -> str:
    """The claim's word from its evidence (module docstring); ``own``: a predicate on an item's setting that says
    whether it is the paper's own (``None``: every item counts)."""
    if not evidence:
        raise ValueError("a claim needs evidence to be decided")
    if (controls and not rejected(controls)) or false_positive(evidence):
        return "not testable here"
    said = words(evidence)
    said = [said[i] for i in split(evidence, own)[0]]
    if not said:
        return "not testable here"
    held, reversed_ = said.count("reproduces"), said.count("does not reproduce")
    if held == len(said):
        return "holds (our reconstruction)" if reconstruction else "reproduces"
    if held:
        return "mixed" if reversed_ else "partly"
    if reversed_:
        return "does not reproduce"
    return "equivalent" if all(w == "equivalent" for w in said) else "inconclusive"


def counts(said: list[str]) -> str:
    """``k of n items hold, j reversed`` (and the unsettled ones, by kind)."""
    n = len(said)
    text = f"{said.count('reproduces')} of {n} item{'s hold' if n != 1 else ' holds'}"
    for word, name in (("does not reproduce", "reversed"), ("equivalent", "equivalent"),
                       ("inconclusive", "inconclusive")):
        if said.count(word):
            text += f", {said.count(word)} {name}"
    return text


def explain(evidence: list[Evidence], controls: list[Evidence] = (), own=None) -> str:
    """Where the claim holds and where not: the counts, then the items grouped by word (the paper's own settings
    first, where declared, then ``in our settings``), then each control and whether the test rejected it."""
    said = words(evidence)
    deciding, ours = split(evidence, own)
    groups: dict[str, list[str]] = {}
    name = {"reproduces": "holds", "does not reproduce": "reversed", "not testable here": "not testable"}
    for i, e in enumerate(evidence):
        if i in ours:
            continue
        groups.setdefault(name.get(said[i], said[i]), []).append(f"{e.setting}: {e.question}")
    head = [counts([said[i] for i in deciding])] if deciding else []  # nothing testable: no "0 of 0"
    text = "; ".join(head + [f"{k}: {', '.join(v)}" for k, v in groups.items()])
    if ours:
        text += f"; in our settings: {counts([said[i] for i in ours])}"
    told = [f"control {e.setting}: {e.question}: {outcome}" for outcome, e in control_outcomes(controls)]
    return "; ".join([text, *told])


def _without(e: Evidence, seeds: set[int]) -> Evidence:
    """``e`` with the evaluation seeds ``seeds`` left out (items with no seeds are as they were)."""
    if e.kind not in ("paired", "against") or e.deterministic:
        return e
    own = e.seeds or tuple(range(len(e.values)))
    keep = [k for k, s in enumerate(own) if s not in seeds]
    if len(keep) == len(own):
        return e
    baseline = tuple(e.baseline[k] for k in keep) if e.kind == "paired" else e.baseline
    return dataclasses.replace(e, values=tuple(e.values[k] for k in keep), baseline=baseline,
                               seeds=tuple(own[k] for k in keep))


def fragility(evidence: list[Evidence], reconstruction: bool = False, controls: list[Evidence] = (), own=None,
              most: int = 3) -> tuple[int, tuple[int, ...]] | None:
    """The fewest evaluation seeds (at most ``most``, and leaving at least 3) whose removal from every item changes
    the claim's word, with the first such seeds; ``None`` where no such set exists (or the claim has no seeds)."""
    seeds = sorted({s for e in evidence if e.kind in ("paired", "against") and not e.deterministic
                    for s in (e.seeds or range(len(e.values)))})
    word = decide(evidence, reconstruction, controls, own)
    for k in range(1, min(most, len(seeds) - 3) + 1):
        for gone in itertools.combinations(seeds, k):
            if decide([_without(e, set(gone)) for e in evidence], reconstruction, controls, own) != word:
                return k, gone
    return None
