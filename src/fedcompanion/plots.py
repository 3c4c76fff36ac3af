"""Figures: a consistent look, the label-mix plot, curves with spread over seeds, atomic saving."""
from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

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


def curves(frame: pd.DataFrame, metric: str, x: str = "round", hue: str = "label", ax=None, **kwargs):
    """Global ``metric`` against ``x``: the mean over seeds as a line, the min-max range shaded."""
    rows = frame[(frame.metric == metric) & (frame.client == -1)]
    ax = sns.lineplot(data=rows, x=x, y="value", hue=hue, errorbar=("pi", 100), ax=ax, **kwargs)
    ax.set(ylabel=metric.replace("_", " "), xlabel=x.replace("_", " "))
    return ax


def save_figure(fig, name: str, folder: str | Path = "figures") -> list[Path]:
    """Write ``<folder>/<name>.png`` and ``.pdf`` (each written to a temp file, then renamed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = folder / f"{name}.{ext}"
        tmp = folder / f".{name}.tmp.{ext}"
        metadata = {"CreationDate": None} if ext == "pdf" else {}  # byte-identical PDFs on every run
        fig.savefig(tmp, format=ext, metadata=metadata)
        os.replace(tmp, path)
        paths.append(path)
    return paths
