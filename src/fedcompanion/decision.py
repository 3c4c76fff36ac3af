"""How a claim's items become its word (each item's own word: :mod:`fedcompanion.verdict`).

Items within a claim are adjusted for multiplicity: the items decided by a p-value (t or sign test) keep a
significant word only if it survives Holm's step-down procedure at 5% over those items; one that does not becomes a
tie. The claim's word combines its items: every item holds: ``reproduces``; none holds and at least one is reversed:
``does not reproduce``; none holds and none is reversed: ``tie``; some hold and some do not: ``partly``, with ``k of
n`` items and the settings named in :func:`explain`. A reconstructed claim (the paper does not give the experiment)
says ``holds (our reconstruction)`` instead of ``reproduces``. A claim may declare **controls**: its test applied to
a method or setting the claim excludes (e.g. a fixed mini-batch where the theorem needs a growing one); every
control must come out ``does not reproduce``, else the test cannot fail and the claim is ``not testable here``.
"""
from __future__ import annotations

import math

from .verdict import LEVEL, Evidence


def words(evidence: list[Evidence]) -> list[str]:
    """Each item's word within its claim: an item decided by a p-value (t or sign test) keeps a significant word
    only if it survives Holm's step-down procedure at 5% over the claim's items so decided; else it is a tie."""
    out = [e.word() for e in evidence]
    p = [e.stats()["p"] if e.test in ("t", "sign") and not e.missing else math.nan for e in evidence]
    tested = sorted((p[i], i) for i in range(len(evidence)) if math.isfinite(p[i]))
    m = len(tested)
    rejected = True
    for k, (p_k, i) in enumerate(tested):
        rejected = rejected and p_k <= (1 - LEVEL) / (m - k)
        if not rejected and out[i] in ("reproduces", "does not reproduce"):
            out[i] = "tie"
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


def decide(evidence: list[Evidence], reconstruction: bool = False, controls: list[Evidence] = ()) -> str:
    """The claim's word from its evidence (module docstring); ``not testable here`` when a control is not
    rejected (the test would also pass a method the claim excludes)."""
    if not evidence:
        raise ValueError("a claim needs evidence to be decided")
    if controls and not rejected(controls):
        return "not testable here"
    said = [w for w, e in zip(words(evidence), evidence) if e.kind != "untestable"]
    if not said:
        return "not testable here"
    held = [w == "reproduces" for w in said]
    if all(held):
        return "holds (our reconstruction)" if reconstruction else "reproduces"
    if any(held):
        return "partly"
    return "does not reproduce" if "does not reproduce" in said else "tie"


def explain(evidence: list[Evidence], controls: list[Evidence] = ()) -> str:
    """Where the claim holds and where not: ``all 6 items hold``, or ``3 of 8 items hold``, then the items grouped
    as ``holds: ...; tie: ...; reversed: ...; not testable: ...`` (Holm-adjusted words, :func:`words`); then each
    control and whether the test rejected it."""
    told = [f"control {e.setting}: {e.question}: {outcome}" for outcome, e in control_outcomes(controls)]
    return "; ".join([_explain(evidence), *told])


def _explain(evidence: list[Evidence]) -> str:
    groups: dict[str, list[str]] = {"holds": [], "tie": [], "reversed": [], "not testable": []}
    for e, w in zip(evidence, words(evidence)):
        where = f"{e.setting}: {e.question}"
        group = {"not testable here": "not testable", "reproduces": "holds", "tie": "tie"}.get(w, "reversed")
        groups[group].append(where + (" (a tie after Holm's adjustment)" if w == "tie" and e.word() != "tie" else ""))
    used = {k: v for k, v in groups.items() if v}
    if len(used) == 1:
        (kind, items), = used.items()
        verb = {"holds": "hold", "tie": "are ties", "reversed": "are reversed", "not testable": "are not testable"}
        return f"{'the item' if len(items) == 1 else f'all {len(items)} items'} " + (
            {"holds": "holds", "tie": "is a tie", "reversed": "is reversed", "not testable": "is not testable"}[kind]
            if len(items) == 1 else verb[kind])
    testable = len(evidence) - len(groups["not testable"])
    return f"{len(groups['holds'])} of {testable} items hold; " + "; ".join(
        f"{k}: {', '.join(v)}" for k, v in used.items())
