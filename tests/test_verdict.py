"""The verdict rule: the t interval against a hand computation, each word, the claim-level combination, and the
committed verdicts: flipping the sign of a stored effect flips the word."""
import dataclasses
import math
from pathlib import Path

import pytest

from fedcompanion.report import Claim, load_summaries
from fedcompanion.verdict import MIN_SEEDS, against, decide, explain, identity, paired, untestable

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


def test_an_interval_containing_zero_is_a_tie_and_not_worse_holds_on_a_tie():
    e = paired("s", "q", "std", "lower", [1.0, 2.0, 3.0, 2.0, 2.0], [2.0, 1.0, 2.5, 2.5, 2.0], range(5))
    assert e.word() == "tie" and not e.holds()
    assert dataclasses.replace(e, holds_if="not worse").holds()


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


def test_claim_level_combination_names_the_settings():
    up = paired("A", "x vs y", "m", "higher", [2, 3, 2, 3, 2], [1, 1, 1, 1, 1], range(5))
    down = paired("B", "x vs y", "m", "higher", [0, 0, 0, 0, 0.1], [1, 1, 1, 1, 1], range(5))
    tie = paired("C", "x vs y", "m", "higher", [1, 2, 0, 1, 1], [1, 1, 1, 1, 1], range(5))
    assert decide([up, up]) == "reproduces" and decide([up], reconstruction=True) == "holds (our reconstruction)"
    assert decide([up, down]) == "partly" and decide([down, tie]) == "does not reproduce" and decide([tie]) == "tie"
    assert explain([up, down, tie]) == "holds: A: x vs y; tie: C: x vs y; reversed: B: x vs y"
    assert explain([up, up]) == "all 2 items hold" and explain([tie]) == "the item is a tie"


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
                if math.isfinite(e.stats()["effect"]):
                    assert _flipped(e).word() == opposite, (claim.id, e.describe())
                    flipped_any |= word != opposite
            before = claim.verdict
            after = decide([_flipped(e) for e in claim.evidence], claim.reconstruction)
            if before == "reproduces" and all(e.holds_if == "better" for e in seeded):
                assert after == "does not reproduce", claim.id
                flipped_any = True
    assert flipped_any


def test_committed_comparative_claims_use_enough_seeds():
    for summary in load_summaries(RESULTS):
        for claim in summary.claims:
            for e in claim.evidence:
                if e.kind == "paired" and not e.deterministic:
                    assert e.n >= MIN_SEEDS, (claim.id, e.describe())
