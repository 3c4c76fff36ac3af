"""The evidence helpers the package declares beside the claims (:mod:`fedcompanion.reproduction.papers`), each against
an exact answer, and what every claim must declare."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fedcompanion.reproduction.papers import DECLARED
from fedcompanion.reproduction.papers.adafedadam import proportional_fairness_gap
from fedcompanion.reproduction.papers.ceadmm import deepest_fraction, iterations_to, k0_exponent


def test_iterations_to_reads_the_best_gradient_so_far():
    k = np.arange(40)
    g = 0.5 ** k
    g[12] = 1.0  # a rise after the target was reached must not move the answer: the best so far counts
    assert iterations_to(k, g, 1e-3) == 10  # 0.5^10 = 9.8e-4 is the first below 1e-3
    assert math.isnan(iterations_to(k, g, 1e-30))
    # the deepest of the fractions that both runs reach
    assert deepest_fraction([(k, g), (k[:21], g[:21])]) == pytest.approx(1e-6)


def test_k0_exponent_is_the_slope_on_log_log_axes():
    k0s = [1, 5, 10, 20]
    assert k0_exponent(k0s, [7 * k0 for k0 in k0s]) == 1.0  # exactly, not 1 - 1e-16: the idle control's value
    assert k0_exponent(k0s, [3 * math.sqrt(k0) for k0 in k0s]) == pytest.approx(0.5)
    assert math.isnan(k0_exponent(k0s, [1, 2, float("nan"), 4]))


def _two_clients(alpha):
    """1-D clients F_1 = (x - 1)^2 + 1, F_2 = (x + 1)^2 + 1 with weights 0.8 and 0.2: the alpha-fair minimiser by a
    fine grid search (the objective is convex), and the losses as a function."""
    p = np.array([0.8, 0.2])

    def losses(x):
        return np.array([(x - 1) ** 2 + 1, (x + 1) ** 2 + 1])

    grid = np.linspace(-1, 1, 200001)
    objective = [p @ losses(x) ** (alpha + 1) / (alpha + 1) for x in grid]
    return p, losses, grid[int(np.argmin(objective))]


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_the_alpha_fair_minimiser_is_proportionally_fair_and_the_average_one_is_not(alpha):
    p, losses, star = _two_clients(alpha)
    others = np.linspace(-3, 3, 61)
    gaps = [proportional_fairness_gap(p, losses(star), losses(x), alpha) for x in others]
    assert min(gaps) > -1e-8  # >= 0 up to the grid search's resolution
    _, _, average = _two_clients(0.0)  # x = 0.6, the size-weighted optimum
    if alpha > 0:  # the control: it is not (p, alpha)-proportionally fair; the alpha-fair minimiser beats it
        assert proportional_fairness_gap(p, losses(average), losses(star), alpha) < -1e-3


def test_every_declared_claim_has_a_kind_and_a_place():
    for claim_id, d in DECLARED.items():
        assert d.where.strip(), claim_id


def test_every_recorded_claim_quotes_its_paper_and_names_its_controls():
    """Every claim the notebooks record is declared in the package with its place in the paper and the paper's
    sentence, and every claim with a testable item names a control its test must reject (the A/A controls of paired
    items are added by the rule)."""
    from fedcompanion.reproduction.claims.record import load_summaries
    from fedcompanion.reproduction.notebook import project_path

    recorded = [c for s in load_summaries(project_path("results")) for c in s.claims]
    assert recorded
    for c in recorded:
        d = DECLARED.get(c.id)
        assert d is not None, f"{c.id} is recorded but not declared in fedcompanion.reproduction.papers"
        assert d.where.strip() and len(d.says) > 40, c.id
        if any(e.kind != "untestable" for e in c.evidence):
            assert c.controls, f"{c.id} names no control its test must reject"
    assert not set(DECLARED) - {c.id for c in recorded}, "a declared claim no notebook records"


def test_a_declaration_without_the_papers_sentence_is_refused():
    from fedcompanion.reproduction.papers import Declared

    with pytest.raises(ValueError, match="says"):
        Declared(kind="theorem", where="Theorem 1", says=" ")
