"""Figures: a consistent look, the label-mix plot, curves with spread over seeds, atomic saving."""
from __future__ import annotations

import io
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .atomic import write_atomic
from .data.partition import label_counts


def style() -> None:
    """The house style: seaborn whitegrid, colour-blind palette, readable sizes."""
    sns.set_theme(style="whitegrid", palette="colorblind", context="notebook")
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
    palette = dict(zip(order, sns.color_palette(n_colors=max(len(order), 1))))
    ok = rows[rows.status != "diverged"]
    sns.lineplot(data=ok, x=x, y="value", hue=hue, hue_order=order, palette=palette, errorbar=("pi", 100),
                 ax=ax, legend=False)
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
            handles.append(plt.Line2D([], [], color=palette[name], label=text))
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


def save_figure(fig, name: str, folder: str | Path = "figures") -> list[Path]:
    """Write ``<folder>/<name>.png`` and ``.pdf`` (each written to a temp file, then renamed)."""
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
