"""The verdicts as figures, one of each per paper and sized for the page (every text >= 9 pt at ``PAGE_WIDTH``
inches): one row per claim, each of its items a square coloured by its word (the report's first figures and the
site's front page), and the forest plot of every seeded comparison, its effect relative to the baseline with its
95% interval, against the zero line (the report's detail)."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .rule.claim import rejected, words


def forest_rows(summaries, papers) -> list[dict]:
    """One row per seeded evidence item (exact, single-value items are left out: they have no interval): the claim,
    its setting, question and metric, the effect relative to the baseline's magnitude with its 95% interval, n and
    the item's word within its claim (:func:`~fedcompanion.reproduction.rule.claim.words`; the forest plot's data),
    paper by paper in the order of ``papers``."""
    rows = []
    for paper in papers:
        for s in summaries:
            for c in s.claims:
                if c.paper != paper:
                    continue
                for e, word in zip(c.evidence, words(c.evidence)):
                    if e.kind not in ("paired", "against") or e.deterministic or e.n < 2:
                        continue
                    st = e.stats()
                    rows.append({"claim": c.id, "setting": e.setting, "label": f"{e.question} [{e.metric}]",
                                 "word": word,
                                 "holds": word == "reproduces", "n": st["n"], "effect": st["relative"],
                                 "low": st.get("relative_low", float("nan")),
                                 "high": st.get("relative_high", float("nan"))})
    return rows


FOREST = "verdicts_forest"
CHART = "verdicts_by_claim"
PAGE_WIDTH = 8.5  # inches: the widest a page shows a figure (the site's column, README on GitHub) at 100%
FONT = 9  # points: the smallest text a verdict figure draws
# what the words mean, in colours that say it (Okabe & Ito's palette, as every figure here): green holds, vermillion
# is reversed, sky blue is equivalent (inside the margin of practical relevance), grey is inconclusive, white
# (outlined) is not testable
WORD_COLOURS = {"holds": "#009E73", "reversed": "#D55E00", "equivalent": "#56B4E9", "inconclusive": "#7F7F7F",
                "not testable": "#FFFFFF"}
ITEM_WORDS = {"reproduces": "holds", "does not reproduce": "reversed", "equivalent": "equivalent",
              "inconclusive": "inconclusive", "not testable here": "not testable"}


# a claim's control (its test applied to a method or setting the claim excludes), in a column of its own headed
# "control": rejected, as it must be (a black diamond, never a check that would read as "passed"); not rejected (the
# claim is then "not testable here"); or none declared
CONTROL_MARKS = {"rejected": dict(marker="D", color="#000000", ms=5),
                 "passed": dict(marker="$!$", color=WORD_COLOURS["reversed"], ms=8),
                 "none": dict(marker="_", color=WORD_COLOURS["inconclusive"], ms=8)}
CONTROL_WORDS = {"rejected": "control rejected (the test can fail)", "passed": "control not rejected",
                 "none": "no control"}


def paper_figure(name: str, paper: str) -> str:
    """The file name (without suffix) of one paper's verdict figure ``name`` (``CHART`` or ``FOREST``)."""
    return f"{name}_{paper.lower()}"


def control_state(claim) -> str:
    """``rejected``, ``passed`` (not rejected) or ``none``: what the verdict chart marks beside a claim's items."""
    return "none" if not claim.controls else "rejected" if rejected(claim.controls) else "passed"


def write_verdict_figures(summaries, folder: Path, papers) -> list[Path]:
    """The report's verdict figures, per paper: :func:`verdict_chart` and :func:`forest_figure`, saved in ``folder``
    as :func:`paper_figure` (none for a paper without a claim to draw)."""
    import matplotlib.pyplot as plt

    from .plots import save_figure

    paths = []
    for paper in papers:
        for name, draw in ((CHART, verdict_chart), (FOREST, forest_figure)):
            fig = draw(summaries, paper)
            if fig is not None:
                paths += save_figure(fig, paper_figure(name, paper), folder)
                plt.close(fig)
    return paths


def typeset(text: str) -> str:
    """A label's ASCII norms typeset (matplotlib's mathtext): ``||grad f(y^j)||^2`` becomes
    $\\|\\nabla{}f(y^j)\\|^2$, with no space inside the maths, so that wrapping never splits it."""
    def norm(m):
        inner = m.group(1).replace("grad ", "\\nabla{}").replace(" ", "")
        return f"$\\|{inner}\\|{m.group(2) or ''}$"
    return re.sub(r"\|\|([^|$]+)\|\|(\^\d)?", norm, text.replace("$", ""))


def _fill(text: str, width: int = 52) -> str:
    """``text`` typeset and wrapped to the label column, never inside its maths."""
    return textwrap.fill(typeset(text), width, break_long_words=False)


def _page(height: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import style

    style()
    return plt.subplots(figsize=(PAGE_WIDTH, height), layout="constrained")


def verdict_chart(summaries, paper):
    """One paper's claims, one row each: its items, one square each, coloured by the item's word within the claim
    (Holm-adjusted, :func:`~fedcompanion.reproduction.rule.claim.words`; hatched where the item is in our setting and
    the paper's own decides); a cross marks an item on which a run diverged (a divergence is an outcome of its own,
    never a number in a mean); the control column says whether the claim's control was rejected (:func:`control_state`);
    the claim's word on the right. The claims' text in full, wrapped; no axis to decode."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    rows = [c for s in summaries for c in s.claims if c.paper == paper]
    if not rows:
        return None
    width = 12  # squares per line: a claim with more items wraps them
    labels = [textwrap.fill(c.claim, 40) for c in rows]
    height = [max(label.count("\n") + 1, -(-len(c.evidence) // width)) + 0.8 for label, c in zip(labels, rows)]
    fig, ax = _page(0.17 * sum(height) + 2.2)
    top = sum(height)
    ticks = []
    for c, h in zip(rows, height):
        top -= h
        middle = top + h / 2
        ticks.append(middle)
        lines = -(-len(c.evidence) // width)
        for j, ((short, _), e, w) in enumerate(zip(c.items(), c.evidence, words(c.evidence))):
            x, y = j % width, middle + lines / 2 - j // width - 1
            ours = short.endswith("(our setting)")
            ax.add_patch(Rectangle((x + 0.1, y + 0.1), 0.8, 0.8, facecolor=WORD_COLOURS[ITEM_WORDS.get(w, "reversed")],
                                   edgecolor="#444444", lw=0.5, hatch="////" if ours else None,
                                   alpha=0.55 if ours else 1.0))
            if e.kind in ("paired", "against") and any(e.diverged.values()):
                ax.plot(x + 0.5, y + 0.5, "x", color="k", ms=5, mew=1.2)
        ax.plot(width + 1.0, middle, ls="", **CONTROL_MARKS[control_state(c)])
    ax.text(width + 1.0, sum(height) + 0.2, "control", ha="center", va="bottom", fontsize=FONT)
    ax.set_yticks(ticks, labels, fontsize=FONT)
    right = ax.secondary_yaxis("right")
    right.set_yticks(ticks, [c.verdict.replace(" (our reconstruction)", "\n(our reconstruction)") for c in rows],
                     fontsize=FONT)
    right.tick_params(length=0)
    for label, c in zip(right.get_yticklabels(), rows):
        label.set_fontweight("bold" if c.verdict in ("reproduces", "holds (our reconstruction)") else "normal")
    ax.set_xlim(0, width + 1.8)
    ax.set_ylim(0, sum(height) + 1.2)
    ax.set_xticks([])
    ax.tick_params(axis="y", length=0)
    ax.grid(False)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
        right.spines[side].set_visible(False)
    handles = [Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="#444444", label=f"item {w}")
               for w, c in WORD_COLOURS.items()]
    handles.append(Rectangle((0, 0), 1, 1, facecolor="#FFFFFF", edgecolor="#444444", hatch="////",
                             label="item in our setting (the paper's own decides)"))
    handles.append(plt.Line2D([], [], marker="x", ls="", color="k", label="a run diverged"))
    handles += [plt.Line2D([], [], ls="", label=CONTROL_WORDS[s], **CONTROL_MARKS[s]) for s in CONTROL_MARKS]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=FONT, frameon=False)
    fig.suptitle(f"{paper}: each claim's items, coloured by their word; its control; its verdict", fontsize=FONT + 2)
    return fig


def forest_figure(summaries, paper):
    """One paper's seeded comparisons, grouped under a header per claim and setting: each effect relative to the
    baseline (positive = the claimed direction) with its 95% interval, against the zero line; colour = the item's
    word."""
    import matplotlib.pyplot as plt

    rows = forest_rows(summaries, [paper])
    if not rows:
        return None
    colours = {w: WORD_COLOURS[ITEM_WORDS[w]] for w in ("reproduces", "does not reproduce", "equivalent",
                                                         "inconclusive")}
    limit = 2.0  # relative effects beyond +-200% are drawn at the edge, with an arrow
    lines, group = [], None  # (label, row; None for a header), each label wrapped to the label column
    for r in rows:
        if (r["claim"], r["setting"]) != group:
            group = r["claim"], r["setting"]
            lines.append((_fill(f"{r['claim']}: {r['setting']}"), None))
        lines.append((_fill(f"{r['label']} (n={r['n']})"), r))
    heights = [label.count("\n") + 1.3 for label, _ in lines]
    fig, ax = _page(0.16 * sum(heights) + 1.5)
    top, ticks = sum(heights), []
    for h, (_, r) in zip(heights, lines):
        top -= h
        ticks.append(top + h / 2)
        if r is None:
            continue
        lo, hi, mid = (max(min(v, limit), -limit) for v in (r["low"], r["high"], r["effect"]))
        ax.plot([lo, hi], [ticks[-1]] * 2, color=colours[r["word"]], lw=2)
        ax.plot(mid, ticks[-1], ">" if r["effect"] > limit else "<" if r["effect"] < -limit else "o",
                color=colours[r["word"]], ms=4)
    ax.axvline(0, color="k", lw=1)
    ax.set_yticks(ticks, [label for label, _ in lines], fontsize=FONT)
    for label, (_, r) in zip(ax.get_yticklabels(), lines):
        label.set_fontweight("bold" if r is None else "normal")
    ax.set_ylim(0, sum(heights))
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlim(-limit * 1.1, limit * 1.1)
    ax.set_xticks([-1, 0, 1], ["-100%", "0", "+100%"], fontsize=FONT)
    ax.set_xlabel("effect relative to the baseline's mean\n(95% t interval; > 0: as claimed;\nbeyond +-200%: "
                  "an arrow)", fontsize=FONT)
    fig.suptitle(f"{paper}: every seeded comparison behind a verdict", fontsize=FONT + 2)
    handles = [plt.Line2D([], [], color=c, lw=2, label=f"item {ITEM_WORDS[w]}") for w, c in colours.items()]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=FONT, frameon=False)
    return fig
