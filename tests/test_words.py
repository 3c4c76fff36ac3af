"""The words a reader cannot misread (issue 57), each case on hand-made evidence and each failing on the old rule:
a reversal is never hidden in "partly"; a tie says whether it is "equivalent" (inside the margin of practical
relevance) or "inconclusive" (with the smallest effect its seeds detect); the paper's own setting decides; a claim
states how many seeds its word hangs on; the headline counts reversals and keeps performance apart from theorems."""
import dataclasses
from pathlib import Path

import pytest

from fedcompanion.reproduction.claims.record import Claim, Summary, load_summaries
from fedcompanion.reproduction.papers import DECLARED, KINDS, MARGINS
from fedcompanion.reproduction.report import group_of, render, verdict_counts
from fedcompanion.reproduction.rule import claim as decision
from fedcompanion.reproduction.rule.claim import decide, detectable, equivalent, explain, fragility, words
from fedcompanion.reproduction.rule.item import paired

RESULTS = Path(__file__).resolve().parents[1] / "results"

SEEDS = range(5)


def item(setting, d, metric="test_accuracy", seeds=SEEDS):
    """Per-seed differences ``d`` (method - baseline, higher is better) as a paired item."""
    return paired(setting, "method vs baseline", metric, "higher", [0.8 + x for x in d], [0.8] * len(d), seeds)


UP = item("A (ours too)", [0.05, 0.06, 0.05, 0.07, 0.06])
DOWN = item("B", [-0.05, -0.06, -0.05, -0.07, -0.06])
SAME = item("C", [0.001, -0.001, 0.002, 0.0, -0.002])      # inside +-0.01 (one accuracy point): equivalent
NOISY = item("D", [0.05, -0.06, 0.02, -0.03, 0.04])       # interval far wider than the margin: inconclusive


def test_a_reversed_item_makes_a_claim_mixed_never_partly():
    assert decide([UP, DOWN]) == "mixed"  # the old rule: "partly"
    assert decide([UP, NOISY]) == "partly" and decide([UP, SAME]) == "partly"


def test_a_tie_says_equivalent_or_inconclusive_with_its_margin_and_detectable_effect():
    assert words([SAME, NOISY]) == ["equivalent", "inconclusive"]  # the old rule: "tie" for both
    assert equivalent(SAME) and not equivalent(NOISY)
    assert decide([SAME]) == "equivalent" and decide([NOISY]) == "inconclusive" and decide([SAME, NOISY]) == \
        "inconclusive"
    note = decision.notes([SAME, NOISY])
    assert "within +-0.01" in note[0] and "beyond +-0.01" in note[1] and "smallest effect 5 seeds detect" in note[1]
    assert detectable(NOISY) > 0.05 > detectable(SAME)
    undeclared = item("E", [0.001, -0.001, 0.002, 0.0, -0.002], metric="a metric with no margin")
    assert words([undeclared]) == ["inconclusive"]  # no declared margin: never "equivalent"


def test_the_papers_own_setting_decides_the_word():
    """AdaFedAdam's main claim: both items of the authors' setting A reversed, one of our setting B holding: the old
    rule said "partly (1 of 4)"."""
    a1, a2 = (item(f"A (200 rounds) {k}", [-0.05, -0.06, -0.05, -0.07, -0.06]) for k in (1, 2))
    b1, b2 = item("B (100 clients)", [0.05, 0.06, 0.05, 0.07, 0.06]), NOISY
    own = DECLARED["adafedadam.faster"].is_own
    assert decide([a1, a2, b1, b2], own=own) == "does not reproduce"
    assert decide([a1, a2, b1, b2]) == "mixed"  # every item counting: still never "partly"
    assert explain([a1, a2, b1, b2], own=own).endswith("in our settings: 1 of 2 items hold, 1 inconclusive")
    claim = Claim("adafedadam.faster", "AdaFedAdam", "faster", [], [a1, a2, b1, b2])
    assert claim.verdict == "does not reproduce" and claim.held() == "0 of 2 items hold, 2 reversed"
    assert [w for w, _ in claim.items()][2:] == ["holds (our setting)", "inconclusive (our setting)"]


def test_fragility_finds_the_seed_a_word_hangs_on():
    """Four seeds clearly better and one far worse: leaving that one out changes the word."""
    hanging = item("F", [0.05, 0.06, 0.05, 0.07, -0.4])
    assert decide([hanging]) == "inconclusive"
    assert fragility([hanging]) == (1, (4,))
    assert fragility([UP]) is None  # no set of up to 2 of 5 seeds changes it (3 always remain)
    claim = Claim("x.y", "FedVRA", "c", [], [hanging])
    assert claim.fragility() == "leaving out seed 4 changes the word (fragility 1)"


def test_the_headline_counts_reversals_and_splits_performance_from_facts():
    up, down = Claim("fedvra.fig3.faster", "FedVRA", "faster", [], [UP, DOWN]), \
        Claim("fedvra.lemma1", "FedVRA", "lemma", [], [UP])
    table = verdict_counts([Summary("nb", "t", "paper", [up, down])])
    head, _, performance, _, facts, _, every = table.splitlines()
    assert every.startswith("| every claim | **all** | 2 |") and every.endswith("| 1 |")
    assert "mixed" in head and head.endswith("with a reversed item |")
    assert performance.startswith("| the papers' comparative performance claims") and performance.endswith("| 1 |")
    assert facts.startswith("| identities, theorems and structural facts") and facts.endswith("|  |")
    assert group_of(up) == "performance" and group_of(down) == "facts"


# ---------------------------------------------------------------------------------- over the committed claims
def test_every_committed_claim_is_declared_with_a_kind_and_a_place():
    claims = [c for s in load_summaries(RESULTS) for c in s.claims]
    assert {c.id for c in claims} == set(DECLARED)
    assert all(d.kind in KINDS and d.where for d in DECLARED.values())


def test_no_partly_claim_hides_a_reversal_and_no_item_is_a_bare_tie():
    for s in load_summaries(RESULTS):
        for c in s.claims:
            if c.verdict == "partly":
                assert "reversed" not in c.held(), c.id
            for (w, e), n in zip(c.items(), c.item_notes()):
                assert not w.startswith("tie")
                if e.kind == "paired" and w.split(" (")[0] in ("equivalent", "inconclusive"):
                    assert "margin of practical relevance" in n, (c.id, e.question)
                if e.word() in ("reproduces", "does not reproduce") and w.split(" (")[0] in decision.UNSETTLED:
                    assert "Holm-adjusted p = " in n, (c.id, e.question)
    text = render(RESULTS)
    assert "**tie**" not in text and "* tie:" not in text


@pytest.mark.parametrize("metric", sorted(MARGINS))
def test_every_margin_is_positive_and_says_why(metric):
    margin, why = MARGINS[metric]
    assert margin > 0 and why


def test_no_committed_tuned_choice_scores_below_its_default():
    """Every committed tuning table: the choice scores at least the default at the evaluation horizon."""
    for s in load_summaries(RESULTS, superseded=True):
        for method, t in s.checks.get("tuned", {}).items():
            if isinstance(t, dict) and "default" in t:
                assert t["score"] >= t["default_score"], (s.notebook, method, t["value"], t["default"])


def test_an_aa_control_that_calls_noise_a_difference_makes_the_claim_untestable():
    """The baseline against itself on other seeds: a test whose pairing lets two halves of one method's seeds
    differ significantly (here the baseline's seeds 0-3 run far below its seeds 4-7) cannot tell a method from
    itself. Enforced from 4 pairs; below, shown only."""
    from fedcompanion.reproduction.rule.claim import same_outcomes

    seeds = range(8)
    base = [0.70, 0.71, 0.70, 0.71, 0.80, 0.81, 0.80, 0.81]
    better = paired("S", "method vs baseline", "test_accuracy", "higher", [b + 0.05 for b in base], base, seeds)
    assert better.word() == "reproduces"
    assert [w for w, _ in same_outcomes([better])] == ["significant"]
    assert decide([better]) == "not testable here"  # the old rule: "reproduces"
    steady = paired("S", "method vs baseline", "test_accuracy", "higher",
                    [b + 0.05 for b in (0.7, 0.8, 0.75, 0.72, 0.78, 0.71, 0.79, 0.74)],
                    [0.7, 0.8, 0.75, 0.72, 0.78, 0.71, 0.79, 0.74], seeds)
    assert same_outcomes([steady])[0][0].startswith("not significant") and decide([steady]) == "reproduces"
    five = paired("S", "q", "test_accuracy", "higher", [b + 0.05 for b in base[2:7]], base[2:7], range(5))
    assert same_outcomes([five])[0][0].startswith("significant at n = 2, not enforced")
    assert decide([five]) == "reproduces"


def _runs(label_values, status=None):
    """A sweep frame: per label and seed, the global metric at rounds 0, 10, 20, 30, 40."""
    import pandas as pd

    status = status or {}
    return pd.DataFrame([dict(label=label, seed=s, round=r, metric="test_accuracy", value=v, client=c,
                              status=status.get((label, s), "ok"))
                         for label, per_seed in label_values.items() for s, path in enumerate(per_seed)
                         for r, v in zip(range(0, 50, 10), path) for c in (-1, 2)])


def test_the_directional_control_is_the_baseline_stopped_at_half_its_rounds():
    """Issue 57: a control that anything trained rejects (the initial model) shows only that the test points the
    right way. The baseline stopped at half its rounds trains, is excluded by the claim, and differs by a trained
    method's margin: a not-worse item whose margin is wider than that difference rejects the untrained model but not
    it, so the claim (which the old control let "reproduce") is not testable here."""
    from fedcompanion.reproduction.claims.from_runs import early_values, stopped_early, untrained_control

    seeds = list(range(8))
    base = [0.1, 0.60, 0.80, 0.86, 0.88]  # the baseline's path; seeds shift it by 0.001
    frame = _runs({"B": [[v + 0.001 * s for v in base] for s in seeds]})
    assert early_values(frame, "test_accuracy", "B", seeds, "higher") == pytest.approx(
        [0.8 + 0.001 * s for s in seeds])  # round 20 = half of 40
    assert early_values(frame, "test_accuracy", "B", [0], "higher", reduce=lambda s: s.mean()) == pytest.approx(
        [(0.1 + 0.6 + 0.8) / 3])
    assert early_values(frame, "test_accuracy", "B", [0], "higher", fraction=0.75) == pytest.approx([0.86])
    method = [0.87 + 0.001 * s + (0.004 if s % 2 else 0.0) for s in seeds]
    final = [0.88 + 0.001 * s for s in seeds]
    loose = paired("S", "A vs B", "test_accuracy", "higher", method, final, seeds, holds_if="not worse",
                   margin=0.1)  # a margin ten times the difference the test should see
    untrained = untrained_control(loose, [0.1] * 8, "A")
    early = stopped_early(loose, early_values(frame, "test_accuracy", "B", seeds, "higher"), "A", "B")
    assert early.question == "B stopped at 50% of its rounds vs B" and early.baseline == loose.baseline
    assert decide([loose], controls=[untrained]) == "reproduces"  # the old control passes the loose test
    assert decide([loose], controls=[early]) == "not testable here"
    tight = dataclasses.replace(loose, margin=0.01)  # a margin the trained difference exceeds: the control is rejected
    assert decide([tight], controls=[stopped_early(tight, early.values, "A", "B")]) == "reproduces"


def test_early_values_reads_a_run_that_did_not_finish_as_the_worst_and_names_what_is_missing():
    from fedcompanion.reproduction.claims.from_runs import early_values

    frame = _runs({"B": [[0.1, 0.5, 0.7, 0.8, 0.9]] * 2}, status={("B", 1): "diverged"})
    assert early_values(frame, "test_accuracy", "B", [0, 1], "higher") == [0.7, float("-inf")]
    assert early_values(frame, "test_accuracy", "B", [1], "lower") == [float("inf")]
    with pytest.raises(ValueError, match="'C' on seed 0"):
        early_values(frame, "test_accuracy", "C", [0], "higher")
    with pytest.raises(ValueError, match="fraction"):
        early_values(frame, "test_accuracy", "B", [0], "higher", fraction=1.0)


def test_no_committed_performance_claim_is_controlled_by_the_untrained_model_alone():
    """Every committed performance claim's directional control is a method that trains (the untrained model may be
    a sanity line beside it, never the control)."""
    from fedcompanion.reproduction.papers import declared

    for s in load_summaries(RESULTS):
        for c in s.claims:
            if declared(c.id).kind == "performance" and c.controls:
                assert any("initial model" not in e.question for e in c.controls), c.id
