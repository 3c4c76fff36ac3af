"""The forest plot: every seeded comparison behind a verdict, its effect relative to the baseline with its 95%
interval, against the zero line (the report's first figure and the site's front page)."""
from __future__ import annotations

from pathlib import Path

from .decision import words


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


def write_forest(summaries, folder: Path, papers) -> list[Path]:
    """The report's first figure: every seeded comparison's effect (relative to the baseline, positive = the
    claimed direction) with its 95% interval, against the zero line; colour = the item's word."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import save_figure, style

    rows = forest_rows(summaries, papers)
    if not rows:
        return []
    style()
    colours = {"reproduces": "C2", "tie": "C7", "does not reproduce": "C3"}
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
    handles = [plt.Line2D([], [], color=c, lw=2, label=w) for w, c in colours.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    paths = save_figure(fig, FOREST, folder)
    plt.close(fig)
    return paths
