"""Figures: a consistent look, the label-mix plot, curves with spread over seeds, atomic saving."""
from __future__ import annotations

import io
import warnings
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..data.partition import label_counts
from ..infra.atomic import write_atomic

# Okabe & Ito's colour-blind-safe palette. Each method keeps its colour in every figure; the papers' own methods
# are drawn in black, thicker and on top; a label that is no method's (a stepsize, an alpha) takes the next colour
# not yet used in its figure.
OKABE_ITO = {"blue": "#0072B2", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "vermillion": "#D55E00",
             "purple": "#CC79A7", "yellow": "#F0E442", "grey": "#7F7F7F"}
METHOD_COLORS = {"FedAvg": "blue", "FedProx": "sky", "FedADMM": "green", "SCAFFOLD": "vermillion",
                 "FedDyn": "purple", "FedAdam": "orange", "FedYogi": "yellow", "FedAdagrad": "grey", "FedAvgM": "sky",
                 "FedNova": "vermillion", "q-FedAvg": "green", "FedMGDA+": "purple", "ICEADMM": "orange", "FL": "blue",
                 "ADMM": "green"}
PAPER_METHODS = ("FedVRA", "AdaFedAdam", "CEADMM")  # the papers' own methods: emphasised


def is_paper_method(label) -> bool:
    """Whether a label names one of the papers' own methods (drawn emphasised)."""
    return str(label).startswith(PAPER_METHODS)


def method_palette(labels) -> dict:
    """A colour for each label of one figure: the papers' methods black (a second variant dark grey), every other
    method its own colour in every figure (by its name's longest known prefix), and a label that shares its
    method's colour with an earlier one, or names no method, the next unused colour."""
    def own(text: str) -> str | None:
        known = max((m for m in METHOD_COLORS if text.startswith(m)), key=len, default=None)
        return OKABE_ITO[METHOD_COLORS[known]] if known else None

    labels = list(labels)
    claimed = {own(str(label)) for label in labels} - {None}  # kept free for the methods that own them
    palette, used = {}, set()
    for label in labels:
        text = str(label)
        if is_paper_method(text):
            colour = "#000000" if "#000000" not in used else "#555555"
        else:
            colour = own(text)
            if colour is None or colour in used:
                free = [c for c in OKABE_ITO.values() if c not in used]
                colour = next((c for c in free if c not in claimed), free[0] if free else "#999999")
        palette[label] = colour
        used.add(colour)
    return palette


def style() -> None:
    """The house style: seaborn whitegrid, the colour-blind palette above, readable sizes."""
    sns.set_theme(style="whitegrid", palette=list(OKABE_ITO.values()), context="notebook")
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 150, "savefig.bbox": "tight"})


def plot_label_mix(parts, labels, num_classes: int, ax=None, max_clients: int = 30, title: str = ""):
    """Stacked bars: the share of each class in each client's data (first ``max_clients`` clients)."""
    counts = label_counts(parts, labels, num_classes)[:max_clients]
    share = counts / counts.sum(axis=1, keepdims=True)
    ax = ax or plt.gca()
    colors = sns.color_palette("tab10", num_classes)
    bottom = np.zeros(len(share))
    for c in range(num_classes):
        ax.bar(np.arange(len(share)), share[:, c], bottom=bottom, color=colors[c], width=0.9, label=str(c))
        bottom += share[:, c]
    ax.set(xlabel="client", ylabel="share of samples", ylim=(0, 1), title=title)
    ax.set_xticks([])
    return ax


def curves(frame: pd.DataFrame, metric: str, x: str = "round", hue: str = "label", ax=None, hue_order=None,
           transform=None, legend: bool = True) -> list[dict]:
    """Global ``metric`` against ``x`` for each ``hue``: the mean over the seeds that did not diverge as a line,
    their min-max range shaded. A run that diverged is never averaged in: it is drawn on its own, dashed, ending
    in a cross at its last finite evaluation, and the legend says how many runs of that curve diverged.
    ``transform`` maps the values (e.g. accuracy -> error). Returns the diverged runs (hue, seed, round)."""
    rows = frame[(frame.metric == metric) & (frame.client == -1)].copy()
    if transform is not None:
        rows["value"] = transform(rows["value"])
    ax = ax or plt.gca()
    order = list(hue_order) if hue_order is not None else list(dict.fromkeys(rows[hue]))
    palette = method_palette(order)
    ok = rows[rows.status != "diverged"]
    band = max(0.07, 0.25 / max(len(order), 1) ** 0.5)  # more curves, fainter min-max bands
    for name in order:
        mine = ok[ok[hue] == name]
        if not len(mine):
            continue
        paper = is_paper_method(name)
        sns.lineplot(data=mine, x=x, y="value", color=palette[name], errorbar=("pi", 100), ax=ax, legend=False,
                     lw=2.4 if paper else 1.4, zorder=3 if paper else 2, err_kws={"alpha": band, "lw": 0})
    if x == "round":
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    diverged = []
    for (name, seed), run in rows[rows.status == "diverged"].groupby([hue, "seed"]):
        run = run.sort_values(x)
        finite = run[np.isfinite(run.value)]
        ax.plot(finite[x], finite.value, ls="--", lw=1, color=palette.get(name, "k"))
        if len(finite):
            ax.plot(finite[x].iloc[-1], finite.value.iloc[-1], marker="x", ms=9, mew=2, color=palette.get(name, "k"))
        diverged.append({"label": str(name), "seed": int(seed), "round": int(run[x].max())})
    if legend:
        handles = []
        for name in order:
            n_bad = sum(d["label"] == str(name) for d in diverged)
            text = str(name) + (f" ({n_bad} run{'s' * (n_bad > 1)} diverged: x)" if n_bad else "")
            handles.append(plt.Line2D([], [], color=palette[name], lw=2.4 if is_paper_method(name) else 1.4,
                                      label=text))
        ax.legend(handles=handles, fontsize="small")
    ax.set(ylabel=metric.replace("_", " "), xlabel=x.replace("_", " "))
    return diverged


def mean_spread(values, digits: int = 3) -> str:
    """'mean +- half range (n seeds)' of per-seed values, e.g. '0.912 +- 0.004 (3 seeds)'."""
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return "n/a"
    if len(v) == 1:
        return f"{v[0]:.{digits}f} (1 seed)"
    return f"{v.mean():.{digits}f} +- {(v.max() - v.min()) / 2:.{digits}f} ({len(v)} seeds)"


class OverlappingTextWarning(UserWarning):
    """A saved figure draws a text over another (:func:`overlapping_texts`); the smoke notebooks' test fails on it."""


def save_figure(fig, name: str, folder: str | Path = "figures") -> list[Path]:
    """Write ``<folder>/<name>.png`` and ``.pdf`` (each written to a temp file, then renamed); warn
    (:class:`OverlappingTextWarning`) if a text of the figure is drawn over another."""
    overlaps = overlapping_texts(fig)
    if overlaps:
        shown = "; ".join(f"{a!r} and {b!r}" for a, b in overlaps[:4])
        warnings.warn(f"figure {name}: {len(overlaps)} overlapping text pair(s): {shown}", OverlappingTextWarning,
                      stacklevel=2)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = folder / f"{name}.{ext}"
        metadata = {"CreationDate": None} if ext == "pdf" else {}  # byte-identical PDFs on every run
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext, metadata=metadata)
        paths.append(write_atomic(path, buffer.getvalue()))
    return paths


def drawn_texts(fig) -> list:
    """The non-empty, visible texts that drawing ``fig`` draws (titles, labels, tick labels, legends, annotations).
    Only texts actually drawn count: an axis keeps tick label objects for ticks outside its view, never drawn."""
    drawn = []
    draw = matplotlib.text.Text.draw

    def recording(text, renderer):
        drawn.append(text)
        return draw(text, renderer)

    matplotlib.text.Text.draw = recording
    try:
        fig.canvas.draw()
    finally:
        matplotlib.text.Text.draw = draw
    return [t for t in dict.fromkeys(drawn) if t.get_visible() and t.get_text().strip()]


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """The pairs of drawn texts (:func:`drawn_texts`) whose bounding boxes overlap: none in a readable figure."""
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if box_a.width > 0 and box_b.width > 0 and box_a.overlaps(box_b)]


def smallest_text(fig, page_width: float) -> tuple[float, str]:
    """The smallest drawn text's size in points as a page shows it: a figure wider than ``page_width`` inches is
    scaled down to it, and its texts with it. Returns ``(points, text)``."""
    scale = min(1.0, page_width / fig.get_figwidth())
    return min((t.get_fontsize() * scale, t.get_text()) for t in drawn_texts(fig))
