"""Figures: every curve of a figure has its own colour, a method keeps its colour from figure to figure, the papers'
own methods are emphasised, and rounds are ticked at whole numbers."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from fedcompanion.reproduction.plots import curves, method_palette  # noqa: E402

SETTING_A = ["AdaFedAdam", "AdaFedAdam (code)", "FedAvg (paper, lr 1)", "FedAvg (code, lr 0.1)",
             "FedAdam (code, lr 1e-3)", "FedAdam (tuned in B)", "FedNova", "q-FedAvg", "FedMGDA+"]


def test_every_curve_of_a_figure_has_its_own_colour_and_methods_keep_theirs():
    for labels in (SETTING_A, ["FedVRA", "FedAvg", "FedProx", "FedADMM", "SCAFFOLD", "FedDyn"], ["a=0", "a=0.5"]):
        palette = method_palette(labels)
        assert len(set(palette.values())) == len(labels), palette
    a, b = method_palette(SETTING_A), method_palette(["FedVRA", "FedNova", "FedAvg"])
    assert a["FedNova"] == b["FedNova"] and a["FedAvg (paper, lr 1)"] == b["FedAvg"]
    assert a["AdaFedAdam"] == b["FedVRA"] == "#000000"


def test_curves_emphasise_the_papers_method_and_tick_whole_rounds():
    frame = pd.DataFrame([{"label": name, "seed": s, "round": r, "client": -1, "metric": "acc", "status": "ok",
                           "value": r * (2 if name == "FedVRA" else 1) + s}
                          for name in ("FedAvg", "FedVRA") for s in (0, 1) for r in range(0, 6)])
    fig, ax = plt.subplots()
    curves(frame, "acc", ax=ax)
    widths = {line.get_color(): line.get_linewidth() for line in ax.get_lines() if line.get_xdata().size}
    assert widths["#000000"] > widths[method_palette(["FedAvg"])["FedAvg"]]
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_xticks())
    plt.close(fig)


@pytest.mark.slow
def test_the_verdict_figures_have_no_text_over_text_and_read_at_page_width():
    """The report's verdict figures (each paper's chart and forest), from the committed summaries: no title, label,
    tick label, verdict word or legend entry drawn over another (matplotlib's bounding boxes), and every text at least
    9 pt as a page of PAGE_WIDTH inches shows it. Each check must catch its defect: a text placed on a title, and the
    old 13-inch chart with 8 pt labels (4.9 pt at page width)."""
    from pathlib import Path

    from fedcompanion.reproduction.plots import overlapping_texts, smallest_text
    from fedcompanion.reproduction.report import PAPERS, load_summaries
    from fedcompanion.reproduction.verdict_figures import FONT, PAGE_WIDTH, forest_figure, verdict_chart

    summaries = load_summaries(Path(__file__).resolve().parents[1] / "results")
    for paper in PAPERS:
        for figure in (verdict_chart(summaries, paper), forest_figure(summaries, paper)):
            assert overlapping_texts(figure) == [], paper
            size, text = smallest_text(figure, PAGE_WIDTH)
            assert size >= FONT - 1e-9, (paper, size, text)
            plt.close(figure)
    fig, ax = plt.subplots()
    ax.set_title("a title")
    ax.text(0.5, 1.0, "a text on the title", transform=ax.transAxes, ha="center")
    assert overlapping_texts(fig), "the check misses a text drawn over the title"
    plt.close(fig)
    old, ax = plt.subplots(figsize=(13, 4))
    ax.set_yticks([0, 1], ["a claim", "another"], fontsize=8)
    assert smallest_text(old, PAGE_WIDTH)[0] < FONT, "the check misses labels a page shrinks below 9 pt"
    plt.close(old)


def test_ascii_norms_are_typeset_and_never_split_by_wrapping():
    import textwrap

    from fedcompanion.reproduction.verdict_figures import typeset

    label = typeset("CEADMM, k0 = 1: C_k = (k / k0) min_j ||grad f(y^j)||^2 does not grow")
    assert "$\\|\\nabla{}f(y^j)\\|^2$" in label and "||" not in label
    assert all(line.count("$") % 2 == 0 for line in textwrap.wrap(label, 20, break_long_words=False))


def test_the_verdict_chart_marks_each_claims_control():
    """Beside a claim's items the chart marks its control: rejected, not rejected, or none declared."""
    import dataclasses

    from fedcompanion.reproduction.report import Claim
    from fedcompanion.reproduction.rule.item import against
    from fedcompanion.reproduction.verdict_figures import control_state

    seeds = [0, 1, 2]
    item = dataclasses.asdict(against("S", "slope vs -1/2", "slope", "lower", [-1.2, -1.3, -1.1], -0.5, seeds))
    fails = dataclasses.asdict(against("S = 1", "slope vs -1/2", "slope", "lower", [0.1, 0.0, 0.2], -0.5, seeds))
    assert control_state(Claim("x", "FedVRA", "a rate", [], [item])) == "none"
    assert control_state(Claim("x", "FedVRA", "a rate", [], [item], controls=[fails])) == "rejected"
    assert control_state(Claim("x", "FedVRA", "a rate", [], [item], controls=[item])) == "passed"
