"""The verdicts as figures: one row per claim, each of its items a square coloured by its word (the report's first
figure and the site's front page), and the forest plot of every seeded comparison, its effect relative to the
baseline with its 95% interval, against the zero line (the report's detail)."""
from __future__ import annotations

from pathlib import Path

from .decision import rejected, words


def forest_rows(summaries, papers) -> list[dict]:
    """One row per seeded evidence item (exact, single-value items are left out: they have no interval): the claim,
    its setting, question and metric, the effect relative to the baseline's magnitude with its 95% interval, n and
    the item's word within its claim (:func:`~fedcompanion.decision.words`; the forest plot's data), paper by paper
    in the order of ``papers``."""
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
                    rows.append({"claim": c.id, "label": f"{c.id} | {e.setting}: {e.question} [{e.metric}]",
                                 "word": word,
                                 "holds": word == "reproduces", "n": st["n"], "effect": st["relative"],
                                 "low": st.get("relative_low", float("nan")),
                                 "high": st.get("relative_high", float("nan"))})
    return rows


FOREST = "verdicts_forest"
CHART = "verdicts_by_claim"
# what the words mean, in colours that say it (Okabe & Ito's palette, as every figure here): green holds, vermillion
# is reversed, sky blue is equivalent (inside the margin of practical relevance), grey is inconclusive, white
# (outlined) is not testable
WORD_COLOURS = {"holds": "#009E73", "reversed": "#D55E00", "equivalent": "#56B4E9", "inconclusive": "#7F7F7F",
                "not testable": "#FFFFFF"}
ITEM_WORDS = {"reproduces": "holds", "does not reproduce": "reversed", "equivalent": "equivalent",
              "inconclusive": "inconclusive", "not testable here": "not testable"}


# a claim's control (its test applied to a method or setting the claim excludes): rejected, as it must be; not
# rejected (the claim is then "not testable here"); or none declared
CONTROL_MARKS = {"rejected": dict(marker="$\\checkmark$", color=WORD_COLOURS["holds"]),
                 "passed": dict(marker="$!$", color=WORD_COLOURS["reversed"]),
                 "none": dict(marker="$-$", color=WORD_COLOURS["inconclusive"])}


def control_state(claim) -> str:
    """``rejected``, ``passed`` (not rejected) or ``none``: what the verdict chart marks beside a claim's items."""
    return "none" if not claim.controls else "rejected" if rejected(claim.controls) else "passed"


def write_verdict_figures(summaries, folder: Path, papers) -> list[Path]:
    """The report's two verdict figures, :func:`verdict_chart` as ``CHART`` and :func:`forest_figure` as ``FOREST``,
    saved in ``folder`` (neither without a claim to draw)."""
    import matplotlib.pyplot as plt

    from .plots import save_figure

    paths = []
    for name, draw in ((CHART, verdict_chart), (FOREST, forest_figure)):
        fig = draw(summaries, papers)
        if fig is not None:
            paths += save_figure(fig, name, folder)
            plt.close(fig)
    return paths


def verdict_chart(summaries, papers):
    """One row per claim, paper by paper: its verdict and its items, one square each, coloured by the item's word
    within the claim (Holm-adjusted, :func:`~fedcompanion.decision.words`); a cross marks an item on which a run
    diverged (a divergence is an outcome of its own, never a number in a mean); a mark after the items says whether
    the claim's control was rejected (:func:`control_state`). Readable at page width: the claims' text in full
    words, no axis to decode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from .plots import style

    rows = [(paper, c) for paper in papers for s in summaries for c in s.claims if c.paper == paper]
    if not rows:
        return None
    style()
    width = max(len(c.evidence) for _, c in rows)
    fig, ax = plt.subplots(figsize=(13, 0.3 * len(rows) + 1.4), layout="constrained")
    for i, (_, c) in enumerate(rows):
        y = len(rows) - 1 - i
        for j, ((short, _), e, w) in enumerate(zip(c.items(), c.evidence, words(c.evidence))):
            word = ITEM_WORDS.get(w, "reversed")
            ours = short.endswith("(our setting)")  # the word comes from the paper's own settings: ours are hatched
            ax.add_patch(Rectangle((j + 0.1, y - 0.35), 0.8, 0.7, facecolor=WORD_COLOURS[word], edgecolor="#444444",
                                   lw=0.5, hatch="////" if ours else None, alpha=0.55 if ours else 1.0))
            if e.kind in ("paired", "against") and any(e.diverged.values()):
                ax.plot(j + 0.5, y, "x", color="k", ms=5, mew=1.2)
        ax.plot(width + 0.6, y, ls="", ms=7, **CONTROL_MARKS[control_state(c)])
        ax.text(width + 1.2, y, c.verdict, va="center", fontsize=8.5,
                fontweight="bold" if c.verdict in ("reproduces", "holds (our reconstruction)") else "normal")
    labels = [f"{paper}: {c.claim if len(c.claim) <= 75 else c.claim[:72] + '...'}" for paper, c in rows]
    ax.set_yticks(range(len(rows)), list(reversed(labels)), fontsize=8)
    ax.set_xlim(0, width + 7.3)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xticks([])
    ax.grid(False)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    handles = [Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="#444444", label=f"item {w}")
               for w, c in WORD_COLOURS.items()]
    handles.append(Rectangle((0, 0), 1, 1, facecolor="#FFFFFF", edgecolor="#444444", hatch="////",
                             label="our setting (the paper's own decides)"))
    handles.append(plt.Line2D([], [], marker="x", ls="", color="k", label="a run diverged"))
    handles += [plt.Line2D([], [], ls="", ms=7, label=label, **CONTROL_MARKS[state])
                for state, label in (("rejected", "its control rejected"), ("passed", "its control not rejected"),
                                     ("none", "no control"))]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=4, fontsize=8, frameon=False)
    ax.set_title("Every claim: its items, each coloured by its word, its control, and the claim's verdict",
                 fontsize=11)
    return fig


def forest_figure(summaries, papers):
    """Every seeded comparison's effect (relative to the baseline, positive = the claimed direction) with its 95%
    interval, against the zero line; colour = the item's word."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import style

    rows = forest_rows(summaries, papers)
    if not rows:
        return None
    style()
    colours = {w: WORD_COLOURS[ITEM_WORDS[w]] for w in ("reproduces", "does not reproduce", "equivalent",
                                                         "inconclusive")}
    limit = 2.0  # relative effects beyond +-200% are drawn at the edge, with an arrow
    fig, ax = plt.subplots(figsize=(12, 0.26 * len(rows) + 1.6))
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        lo, hi, mid = (max(min(v, limit), -limit) for v in (r["low"], r["high"], r["effect"]))
        ax.plot([lo, hi], [y, y], color=colours[r["word"]], lw=2)
        ax.plot(mid, y, ">" if r["effect"] > limit else "<" if r["effect"] < -limit else "o",
                color=colours[r["word"]], ms=4)
    ax.axvline(0, color="k", lw=1)
    ax.set_yticks(range(len(rows)), [f"{r['label']} (n={r['n']})" for r in reversed(rows)], fontsize=7)
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlim(-limit * 1.1, limit * 1.1)
    ticks = [-2, -1, -0.5, -0.1, 0, 0.1, 0.5, 1, 2]
    ax.set_xticks(ticks, [f"{t:+.0%}" if t else "0" for t in ticks])
    ax.set(xlabel="effect in the claimed direction, relative to the baseline's mean (95% t interval; > 0: as "
                  "claimed)", title="Every seeded comparison behind a verdict")
    handles = [plt.Line2D([], [], color=c, lw=2, label=f"item {ITEM_WORDS[w]}") for w, c in colours.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    return fig
