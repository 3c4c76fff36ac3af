"""The reproduction report: each notebook records its checked claims; ``REPRODUCTION.md`` and README's table
are generated from those records, never typed by hand.

A notebook ends with :func:`record`, which writes ``<results>/summaries/<notebook>.json``: for every claim of the
paper that the notebook tests, the claim in one line, the figure, the measured numbers (mean and spread over
seeds), the verdict, the settings and the deviations from the paper, plus the runs that diverged. ``make
reproduce`` adds the wall time of each notebook (``_timings.json``) and ends with :func:`write_report`.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .atomic import write_atomic

VERDICTS = ("reproduces", "partly", "does not reproduce", "not testable here", "holds (our reconstruction)")
PAPERS = {
    "FedVRA": "Wang et al., *Beyond ADMM: a unified client-variance-reduced adaptive FL framework* (AAAI 2023)",
    "CEADMM": "Zhou & Li, *Communication-efficient ADMM-based federated learning*",
    "AdaFedAdam": "Ju et al., *Accelerating fair federated learning: adaptive federated Adam* (IEEE TMLCN 2024)",
}
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Claim:
    """One claim of a paper, as a notebook tested it.

    Attributes:
        id: stable identifier, e.g. ``fedvra.fig2.dual_stepsize``.
        paper: ``FedVRA``, ``CEADMM`` or ``AdaFedAdam``.
        claim: the claim in one line.
        figures: the figure files (names in ``figures/``, without extension) that test it.
        numbers: what was measured (means and spreads over seeds), in words.
        verdict: one of ``VERDICTS``.
        settings: the settings of the runs (those the paper does not give are ours: say so).
        deviations: where the runs depart from the paper or the authors' code, and reconstructions.
    """

    id: str
    paper: str
    claim: str
    figures: list[str]
    numbers: str
    verdict: str
    settings: str = ""
    deviations: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.paper not in PAPERS:
            raise ValueError(f"paper must be one of {list(PAPERS)}, got {self.paper!r}")


@dataclass
class Summary:
    notebook: str
    title: str
    profile: str
    claims: list[Claim]
    diverged: list[dict] = field(default_factory=list)
    runs: int = 0
    checks: dict = field(default_factory=dict)


def summaries_dir(results_dir: str | Path) -> Path:
    return Path(results_dir) / "summaries"


def record(notebook: str, title: str, claims: list[Claim], results_dir: str | Path, profile: str,
           diverged: list[dict] | None = None, runs: int = 0, checks: dict | None = None) -> Path:
    """Write a notebook's summary (atomically) and return its path. ``checks`` holds facts the tests read back
    from the committed results (e.g. where each tuned value lies in its grid)."""
    summary = Summary(notebook, title, profile, claims, diverged or [], runs, checks or {})
    folder = summaries_dir(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (notebook.replace("/", "--") + ".json")
    return write_atomic(path, json.dumps(asdict(summary), indent=1, sort_keys=True) + "\n")


def load_summaries(results_dir: str | Path) -> list[Summary]:
    folder = summaries_dir(results_dir)
    out = []
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("_"):
            continue
        data = json.loads(path.read_text())
        data["claims"] = [Claim(**c) for c in data["claims"]]
        out.append(Summary(**data))
    return out


def read_timings(results_dir: str | Path) -> dict:
    """``_timings.json``: the machine, each notebook's wall time and (after a full reproduction) its elapsed
    time and how many notebooks ran at once."""
    path = summaries_dir(results_dir) / "_timings.json"
    return json.loads(path.read_text()) if path.exists() else {"notebooks": {}, "machine": "?"}


def write_timings(results_dir: str | Path, timings: dict[str, float], *, elapsed: float | None = None,
                  parallel: int | None = None) -> None:
    """Merge notebook wall times (seconds) into ``_timings.json`` with a description of the machine; ``elapsed``
    (a whole reproduction, ``parallel`` notebooks at a time) replaces the previous one."""
    path = summaries_dir(results_dir) / "_timings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = read_timings(results_dir)
    notebooks = {**old.get("notebooks", {}), **{k: round(v, 1) for k, v in timings.items()}}
    data = {"machine": machine(), "notebooks": dict(sorted(notebooks.items()))}
    if elapsed is not None:
        data["elapsed"], data["parallel"] = round(elapsed, 1), parallel
    elif "elapsed" in old:
        data["elapsed"], data["parallel"] = old["elapsed"], old.get("parallel")
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def machine() -> str:
    from .experiments import RUN_THREADS
    from .machine import describe

    return f"{describe()}, {RUN_THREADS} torch thread(s) per run and per notebook kernel"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claims_table(summaries: list[Summary], link_prefix: str = "") -> str:
    rows = ["| paper | claim | verdict | measured here | where |", "|---|---|---|---|---|"]
    for paper in PAPERS:
        for s in summaries:
            for c in s.claims:
                if c.paper != paper:
                    continue
                where = f"`{s.notebook}`"
                rows.append(f"| {paper} | {_escape(c.claim)} | **{c.verdict}** | {_escape(c.numbers)} | {where} |")
    return "\n".join(rows)


def render(results_dir: str | Path = "results") -> str:
    """REPRODUCTION.md from the summaries in ``results_dir`` (deterministic: the same files, the same text)."""
    summaries = load_summaries(results_dir)
    timings = read_timings(results_dir)
    profiles = sorted({s.profile for s in summaries})
    lines = [
        "# Reproduction report",
        "",
        "Generated by `make reproduce` (or `fedcompanion report`) from the summaries the notebooks write to "
        "`results/summaries/`; do not edit by hand. Every number below comes from the runs in `results/`.",
        "",
        f"Profile: {', '.join(profiles) or 'none'}. Machine: {timings.get('machine', '?')}.",
        "",
        "## Papers",
        "",
    ]
    lines += [f"* **{key}**: {title}" for key, title in PAPERS.items()]
    counts = {v: 0 for v in VERDICTS}
    for s in summaries:
        for c in s.claims:
            counts[c.verdict] += 1
    lines += ["", "## Verdicts at a glance", "",
              ", ".join(f"{n} {v}" for v, n in counts.items() if n) + ".", "", "## Claims", ""]
    for paper in PAPERS:
        claims = [(s, c) for s in summaries for c in s.claims if c.paper == paper]
        if not claims:
            continue
        lines += [f"### {paper}", ""]
        for s, c in claims:
            figures = ", ".join(f"[`{f}`](figures/{f}.png)" for f in c.figures) or "none"
            lines += [f"#### {c.claim}", "",
                      f"* **Verdict: {c.verdict}.** {c.numbers}",
                      f"* Figure: {figures}; notebook `notebooks/{s.notebook}.ipynb`; claim id `{c.id}`."]
            if c.settings:
                lines.append(f"* Settings: {c.settings}")
            if c.deviations:
                lines.append(f"* Deviations from the paper: {c.deviations}")
            lines.append("")
    diverged = [(s.notebook, d) for s in summaries for d in s.diverged]
    lines += ["## Runs that diverged", ""]
    if diverged:
        lines += [f"* `{nb}`: {d.get('label', '?')} (seed {d.get('seed', '?')}) diverged at round "
                  f"{d.get('round', '?')}; shown as diverged in the figure, left out of its mean curve."
                  for nb, d in diverged]
    else:
        lines.append("None.")
    lines += ["", "## Time per notebook", "", "| notebook | runs in the cache | wall time (s) |", "|---|---|---|"]
    for s in summaries:
        seconds = timings.get("notebooks", {}).get(s.notebook)
        lines.append(f"| `{s.notebook}` | {s.runs} | {'' if seconds is None else f'{seconds:.0f}'} |")
    total = sum(v for v in timings.get("notebooks", {}).values())
    lines.append(f"| sum of the notebooks | | {total:.0f} |")
    if timings.get("elapsed") is not None:
        parallel = timings.get("parallel")
        at_a_time = "one notebook" if parallel == 1 else f"{parallel} notebooks"
        lines.append(f"| `make reproduce`, elapsed ({at_a_time} at a time) | | {timings['elapsed']:.0f} |")
    lines += ["", "## Figure gallery", ""]
    figures = sorted({f for s in summaries for c in s.claims for f in c.figures})
    for f in figures:
        lines += [f"### `{f}`", "", f"![{f}](figures/{f}.png)", ""]
    return "\n".join(lines).rstrip() + "\n"


README_START, README_END = "<!-- claims:start -->", "<!-- claims:end -->"


def update_readme(readme: Path, results_dir: str | Path) -> bool:
    """Replace README's generated claims table (between the markers); returns whether it changed."""
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no {README_START} ... {README_END} section")
    table = claims_table(load_summaries(results_dir))
    new = re.sub(f"{re.escape(README_START)}.*?{re.escape(README_END)}",
                 lambda _: f"{README_START}\n{table}\n{README_END}", text, flags=re.S)
    if new != text:
        write_atomic(readme, new)
    return new != text


class NoSummaries(FileNotFoundError):
    """The results folder holds no notebook summaries: there is nothing to report (and nothing is written)."""


def write_report(results_dir: str | Path = ROOT / "results", output: Path = ROOT / "REPRODUCTION.md",
                 readme: Path | None = ROOT / "README.md") -> Path:
    """Write REPRODUCTION.md (and README's claims table) from the summaries in ``results_dir``, each file
    atomically; raises :class:`NoSummaries` (writing nothing) where there are none."""
    if not load_summaries(results_dir):
        raise NoSummaries(f"no notebook summaries in {summaries_dir(results_dir)}: run the notebooks "
                          "(make reproduce) first, or point --results at a results folder")
    write_atomic(output, render(results_dir))
    if readme is not None and readme.exists() and README_START in readme.read_text():
        update_readme(readme, results_dir)
    return output
