"""The verdict rule: the t interval against a hand computation, each word, the claim-level combination, and the
committed verdicts: flipping the sign of a stored effect flips the word."""
import dataclasses
import math
from pathlib import Path

import pytest

from fedcompanion.reproduction.report import Claim, load_summaries
from fedcompanion.reproduction.rule.claim import decide, explain, holm, notes, words
from fedcompanion.reproduction.rule.item import MIN_DRAWS, MIN_SEEDS, against, identity, paired, untestable

RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_paired_effect_interval_and_p_by_hand():
    # d = method - baseline, higher is better: d = [1, 2, 3, 4, 5] -> mean 3, sd sqrt(2.5), t_{0.975,4} = 2.7764451
    e = paired("s", "a vs b", "accuracy", "higher", [2, 4, 6, 8, 10], [1, 2, 3, 4, 5], range(5))
    s = e.stats()
    half = 2.7764451051977987 * math.sqrt(2.5) / math.sqrt(5)
    assert s["effect"] == 3 and s["n"] == 5
    assert s["low"] == pytest.approx(3 - half, rel=1e-12) and s["high"] == pytest.approx(3 + half, rel=1e-12)
    # two-sided one-sample t: t = 3 / (sqrt(2.5)/sqrt(5)) = 4.2426; p = 0.01324 (scipy.stats.t.sf(t, 4) * 2)
    assert s["p"] == pytest.approx(0.013236, abs=1e-5)
    assert s["relative"] == pytest.approx(3 / 3)  # baseline mean 3
    assert e.word() == "reproduces" and e.holds()


def test_the_direction_decides_the_sign():
    values, base = [0.30, 0.31, 0.29, 0.30, 0.32], [0.40, 0.41, 0.39, 0.42, 0.40]
    assert paired("s", "q", "loss", "lower", values, base, range(5)).word() == "reproduces"
    assert paired("s", "q", "loss", "higher", values, base, range(5)).word() == "does not reproduce"


def test_an_interval_containing_zero_is_a_tie_and_not_worse_needs_its_declared_margin():
    """Issue 43: "not worse" held on any tie with no margin, so it passed whenever the test lacked power."""
    e = paired("s", "q", "std", "lower", [1.0, 2.0, 3.0, 2.0, 2.0], [2.0, 1.0, 2.5, 2.5, 2.0], range(5))
    assert e.word() == "tie" and not e.holds()  # d = [1, -1, -0.5, 0.5, 0]: interval [-0.98, +0.98]
    with pytest.raises(ValueError, match="non-inferiority margin"):
        dataclasses.replace(e, holds_if="not worse")
    assert not dataclasses.replace(e, holds_if="not worse", margin=0.5).holds()  # -0.98 < -0.5: a tie
    assert dataclasses.replace(e, holds_if="not worse", margin=1.0).holds()  # above -1
    assert dataclasses.replace(e, holds_if="not worse", margin=1.0).stats()["p"] < 0.05
    worse = paired("s", "q", "std", "lower", [3.0, 3.1, 3.0, 3.2, 3.0], [1.0] * 5, range(5), "not worse", 0.5)
    assert worse.word() == "does not reproduce"


def test_one_seed_tells_nothing_apart_unless_the_run_is_exact():
    assert paired("s", "q", "m", "higher", [2.0], [1.0], [0]).word() == "tie"
    assert against("s", "rounds", "rounds to 1e-8", "lower", [27], 60, deterministic=True).word() == "reproduces"


def test_a_diverged_run_counts_against_the_claim():
    assert paired("s", "q", "m", "higher", [1.0, math.nan, 1.0], [0.0, 0.0, 0.0], range(3)).word() == \
        "does not reproduce"


def test_identity_and_untestable():
    assert identity("s", "eq. 11", 4e-16, 1e-12).word() == "reproduces"
    assert identity("s", "eq. 11", 4e-6, 1e-12).word() == "does not reproduce"
    assert decide([untestable("s", "rate", "the window is too short")]) == "not testable here"


def test_a_divergence_is_an_outcome_decided_by_the_sign_test_never_an_infinite_effect():
    """Issue 43: one seed where only the baseline diverged made the effect +inf and the item "reproduces", although
    the method was worse by 0.05 on the other four seeds."""
    e = paired("s", "q", "accuracy", "higher", [0.80, 0.80, 0.80, 0.80, 0.80], [0.85, 0.85, 0.85, 0.85, -math.inf],
               range(5))
    s = e.stats()
    assert math.isfinite(s["effect"]) and s["effect"] == pytest.approx(-0.05) and e.test == "sign"
    assert (s["wins"], s["losses"]) == (1, 4) and s["p"] == pytest.approx(0.375)  # 2 * (1 + 5) / 32
    assert e.word() == "tie" and e.diverged == {"method": [], "baseline": [4], "both": []}
    assert "the baseline diverged on 1 of 5 seeds" in e.describe() and "inf" not in e.describe()
    # 8 seeds: the method wins all 6 it finished against a baseline that diverged twice: p = 2 / 256
    many = paired("s", "q", "loss", "lower", [1.0] * 8, [2.0] * 6 + [math.inf] * 2, range(8))
    assert many.test == "sign" and many.stats()["p"] == pytest.approx(2 / 256) and many.word() == "reproduces"
    lost = paired("s", "q", "loss", "lower", [math.inf] * 2 + [3.0] * 6, [2.0] * 8, range(8))
    assert lost.word() == "does not reproduce"  # a divergence counts as a loss


def test_a_threshold_item_is_judged_seed_by_seed():
    """Issue 43: every seed passed the threshold but a floor value widened the t interval: the item came out tie."""
    floor = against("s", "stationarity", "log10 ||grad||^2", "lower", [-8.1, -8.1, -8.1, -8.1, -38.0], -8.0,
                    range(5))
    assert floor.stats()["low"] < 0  # the t interval (the old rule) contains 0: one very favourable seed widens it
    assert floor.test == "threshold" and floor.stats()["passes"] == 5 and floor.word() == "reproduces"
    split = against("s", "ratio", "variance ratio", "lower", [0.5, 0.6, 1.2, 0.4, 0.5], 1.0, range(5))
    assert split.word() == "tie" and "4 of 5 seeds pass" in split.describe()
    assert dataclasses.replace(split, share=0.8).word() == "reproduces"
    assert against("s", "ratio", "variance ratio", "lower", [1.5] * 5, 1.0, range(5)).word() == "does not reproduce"
    diverged = against("s", "ratio", "variance ratio", "lower", [0.5] * 4 + [math.inf], 1.0, range(5))
    assert diverged.word() == "tie"  # the diverged seed fails


def test_holm_adjusts_the_items_of_a_claim_together():
    """Issue 43: 8-16 items at 95% each make one chance reversal likely. Three items with p = 6e-5, 0.044 and 0.045
    alone all reproduce; Holm keeps the first (<= 0.05/3) and stops at the second (0.044 > 0.05/2)."""
    def item(name, d):
        return paired(name, "x vs y", "m", "higher", [1 + x for x in d], [1.0] * len(d), range(len(d)))

    strong = item("A", [0.3, 0.35, 0.25, 0.32, 0.28])
    weak = item("B", [0.1, 0.4, 0.05, 0.3, 0.12])
    weaker = item("C", [0.1, 0.5, 0.05, 0.3, 0.2])
    ps = [e.stats()["p"] for e in (strong, weak, weaker)]
    assert ps[0] <= 0.05 / 3 and 0.05 / 2 < ps[1] < ps[2] < 0.05, ps
    assert [e.word() for e in (strong, weak, weaker)] == ["reproduces"] * 3
    assert words([strong, weak, weaker]) == ["reproduces", "inconclusive", "inconclusive"]
    assert decide([strong, weak, weaker]) == "partly"
    assert explain([strong, weak, weaker]).startswith("1 of 3 items hold, 2 inconclusive; ")
    adjusted = notes([strong, weak, weaker])  # the adjusted p beside the raw one, where it changed the word
    assert adjusted[0] == "" and all("Holm-adjusted p = " in n and "above 0.05" in n for n in adjusted[1:])
    assert holm([strong, weak, weaker]) == pytest.approx([3 * ps[0], 2 * ps[1], max(2 * ps[1], ps[2])])
    assert decide([strong, weak]) == "reproduces"  # 0.044 <= 0.05 / 1 at the second step


def test_claim_level_combination_names_the_settings():
    up = paired("A", "x vs y", "m", "higher", [2, 3, 2, 3, 2], [1, 1, 1, 1, 1], range(5))
    down = paired("B", "x vs y", "m", "higher", [0, 0, 0, 0, 0.1], [1, 1, 1, 1, 1], range(5))
    tie = paired("C", "x vs y", "m", "higher", [1, 2, 0, 1, 1], [1, 1, 1, 1, 1], range(5))
    assert decide([up, up]) == "reproduces" and decide([up], reconstruction=True) == "holds (our reconstruction)"
    assert decide([up, down]) == "mixed" and decide([up, tie]) == "partly"  # a reversal is never "partly"
    assert decide([down, tie]) == "does not reproduce" and decide([tie]) == "inconclusive"
    assert explain([up, down, tie]) == ("1 of 3 items hold, 1 reversed, 1 inconclusive; holds: A: x vs y; "
                                        "reversed: B: x vs y; inconclusive: C: x vs y")
    assert explain([up, up]) == "2 of 2 items hold; holds: A: x vs y, A: x vs y"


def test_a_claim_needs_evidence_and_its_word_is_not_stored():
    with pytest.raises(ValueError, match="no evidence"):
        Claim("x", "FedVRA", "c", [], [])
    claim = Claim("x", "FedVRA", "c", [], [identity("s", "q", 0.0, 1e-12)])
    assert "verdict" not in dataclasses.asdict(claim)


def _flipped(e):
    if e.kind == "paired":
        return dataclasses.replace(e, values=e.baseline, baseline=e.values)
    return dataclasses.replace(e, better="lower" if e.better == "higher" else "higher")


def test_flipping_the_sign_of_every_committed_effect_flips_the_word():
    flipped_any = False
    for summary in load_summaries(RESULTS):
        for claim in summary.claims:
            seeded = [e for e in claim.evidence if e.kind in ("paired", "against")]
            if not seeded or any(e.kind not in ("paired", "against") for e in claim.evidence):
                continue
            for e in seeded:
                word = e.word()
                opposite = {"reproduces": "does not reproduce", "does not reproduce": "reproduces"}.get(word, word)
                if math.isfinite(e.stats()["effect"]) and e.holds_if == "better":  # a margin is one-sided
                    assert _flipped(e).word() == opposite, (claim.id, e.describe())
                    flipped_any |= word != opposite
            before = claim.verdict
            after = decide([_flipped(e) for e in claim.evidence], claim.reconstruction)
            if before == "reproduces" and all(e.holds_if == "better" for e in seeded):
                assert after == "does not reproduce", claim.id
                flipped_any = True
    assert flipped_any


def test_committed_claims_use_enough_seeds_draws_and_repeats():
    """Issue 57: every paired item, and every seeded item of a performance claim, has >= MIN_SEEDS evaluation seeds
    (a CPU time: >= MIN_DRAWS interleaved repeats); every other seeded item >= MIN_DRAWS draws; an exact
    (deterministic) value is one computation and never a time."""
    from fedcompanion.reproduction.papers import declared

    for summary in load_summaries(RESULTS):
        for claim in summary.claims:
            performance = declared(claim.id).kind == "performance"
            for e in list(claim.evidence) + list(claim.controls):
                timing = "time" in e.metric
                if e.deterministic:
                    assert len(e.values) == 1 and not timing, (claim.id, e.question)
                elif e.kind in ("paired", "against"):
                    need = MIN_DRAWS if timing or not (performance or e.kind == "paired") else MIN_SEEDS
                    assert len(e.values) >= need, (claim.id, e.question, len(e.values), need)


def test_a_seed_on_which_both_diverged_compares_nothing():
    """Issue 47: inf - inf is no missing run; the seeds both finished decide."""
    e = paired("s", "q", "m", "higher", [1.0, 1.1, 1.2, -math.inf], [0.0, 0.1, 0.1, -math.inf], range(4))
    assert e.n == 3 and e.both_diverged == [3] and e.word() == "reproduces"
    assert math.isfinite(e.stats()["effect"])
    nothing = paired("s", "q", "m", "lower", [math.inf] * 2, [math.inf] * 2, range(2))
    assert nothing.word() == "tie" and "nothing compared" in nothing.describe()


def test_a_claim_whose_control_passes_its_test_is_not_testable():
    """Issue 43: a test is evidence only if it can fail. The slope test of the rate claim against a wrong setting (a
    fixed batch, whose noise term does not shrink): rejected, the claim keeps its word; passed, the claim is "not
    testable here", and the report says which control was not rejected."""
    seeds = [0, 1, 2, 3, 4]
    claim = [against("S = sqrt(R)", "slope vs -1/2", "slope", "lower", [-1.3, -1.4, -1.2, -1.5, -1.3], -0.5, seeds)]
    wrong = [against("S = 1", "slope vs -1/2", "slope", "lower", [-0.1, 0.05, -0.2, -0.1, 0.0], -0.5, seeds)]
    also_passes = [against("S = 1", "slope vs -1/2", "slope", "lower", [-0.9, -0.8, -0.95, -0.9, -0.7], -0.5, seeds)]
    assert decide(claim) == "reproduces" and decide(claim, controls=wrong) == "reproduces"
    assert decide(claim, controls=also_passes) == "not testable here"
    assert "control S = 1: slope vs -1/2: rejected" in explain(claim, wrong)
    assert "reproduces, not rejected" in explain(claim, also_passes)
    stored = Claim("x.rate", "FedVRA", "a rate", [], [dataclasses.asdict(e) for e in claim],
                   controls=[dataclasses.asdict(e) for e in also_passes])
    assert stored.verdict == "not testable here" and stored.controls == also_passes
    assert [w for w, _ in stored.checked_controls()] == ["reproduces, not rejected"]
    kept = Claim("x.rate", "FedVRA", "a rate", [], [dataclasses.asdict(e) for e in claim],
                 controls=[dataclasses.asdict(e) for e in wrong])
    assert [w for w, _ in kept.checked_controls()] == ["rejected"]


def test_the_initial_model_in_the_methods_place_is_a_control_a_paired_test_must_reject():
    """Issue 43: every paired "faster" or "more accurate" claim carries a control: the initial model (no training) in
    the method's place. Round 0 is read from the runs and must agree across them (one seed, one initial model); a
    test that cannot reject the untrained model cannot tell training from none (the claim becomes not testable)."""
    import pandas as pd

    from fedcompanion.reproduction.claims.from_runs import initial_values, round_zero, untrained_control

    seeds = [0, 1, 2]
    rows = [dict(label=label, seed=s, round=r, metric="loss", value=v, client=c)
            for label, start, end in (("A", 2.3, 0.4), ("B", 2.3, 0.6)) for s in seeds
            for r, v in ((0, start + 0.01 * s), (10, end + 0.01 * s)) for c in (-1, 3)]
    table = round_zero(pd.DataFrame(rows))
    assert initial_values(table, "loss", ["A", "B"], seeds) == pytest.approx([2.3, 2.31, 2.32])
    claim = paired("B", "A vs B", "loss", "lower", [0.40, 0.41, 0.42], [0.6, 0.63, 0.61], seeds)
    control = untrained_control(claim, initial_values(table, "loss", ["A", "B"], seeds), "A")
    assert control.question == "the initial model (no training) vs B" and control.baseline == claim.baseline
    assert decide([claim], controls=[control]) == "reproduces"
    # a metric the untrained model wins (it loses nothing when a setting changes): the control is not rejected
    robust = paired("B", "A vs B", "accuracy lost", "lower", [0.02, 0.03, 0.01], [0.05, 0.06, 0.07], seeds)
    assert decide([robust], controls=[untrained_control(robust, [0.0, 0.0, 0.0], "A")]) == "not testable here"
    other = pd.DataFrame([dict(r, value=r["value"] * 1.1) if r["label"] == "B" else r for r in rows])
    with pytest.raises(ValueError, match="seed 0.*one initial model"):
        initial_values(round_zero(other), "loss", ["A", "B"], seeds)
    with pytest.raises(ValueError, match="paired item"):
        untrained_control(against("B", "A", "loss", "lower", [0.4, 0.4, 0.4], 1.0, seeds), [2.3] * 3, "A")


def test_the_t_interval_and_its_p_are_scipys_one_sample_t_test():
    """t_interval computes the interval and the p directly (the rule asks for thousands): they must be scipy's."""
    import numpy as np
    from scipy import stats

    from fedcompanion.reproduction.rule.item import t_interval

    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 8, 20):
        for shift in (0.0, 0.3, 1.0, 5.0):
            d = rng.normal(shift, 1.0, n)
            mean, low, high, p = t_interval(d)
            ref = stats.ttest_1samp(d, 0.0)
            low_ref, high_ref = ref.confidence_interval(0.95)
            assert p == pytest.approx(float(ref.pvalue), rel=1e-10, abs=1e-300)
            assert (low, high) == (pytest.approx(float(low_ref), rel=1e-10), pytest.approx(float(high_ref), rel=1e-10))
            assert (p < 0.05) == (low > 0 or high < 0)
