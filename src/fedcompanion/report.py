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
from .forest import FOREST, write_forest
from .verdict import VERDICTS, Evidence, decide, explain, from_dict

PAPERS = {
    "FedVRA": "Wang et al., *Beyond ADMM: a unified client-variance-reduced adaptive FL framework* (AAAI 2023)",
    "CEADMM": "Zhou & Li, *Communication-efficient ADMM-based federated learning*",
    "AdaFedAdam": "Ju et al., *Accelerating fair federated learning: adaptive federated Adam* (IEEE TMLCN 2024)",
}
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Claim:
    """One claim of a paper, as a notebook tested it; its verdict is computed from ``evidence`` by the package's rule
    (:mod:`fedcompanion.verdict`), never written by hand.

    Attributes:
        id: stable identifier, e.g. ``fedvra.fig2.dual_stepsize``.
        paper: ``FedVRA``, ``CEADMM`` or ``AdaFedAdam``.
        claim: the claim in one line.
        figures: the figure files (names in ``figures/``, without extension) that test it.
        evidence: the items the rule decides on (:class:`~fedcompanion.verdict.Evidence`, or their dicts as stored).
        numbers: what else was measured, in words (means and spreads over seeds).
        settings: the settings of the runs (those the paper does not give are ours: say so).
        deviations: where the runs depart from the paper or the authors' code, and reconstructions.
        reconstruction: the experiment is ours (the paper does not give it): the rule says "holds (our
            reconstruction)" where it would say "reproduces".
    """

    id: str
    paper: str
    claim: str
    figures: list[str]
    evidence: list
    numbers: str = ""
    settings: str = ""
    deviations: str = ""
    reconstruction: bool = False

    def __post_init__(self):
        if self.paper not in PAPERS:
            raise ValueError(f"paper must be one of {list(PAPERS)}, got {self.paper!r}")
        self.evidence = [e if isinstance(e, Evidence) else from_dict(e) for e in self.evidence]
        if not self.evidence:
            raise ValueError(f"claim {self.id!r} has no evidence: the verdict rule needs at least one item")

    @property
    def verdict(self) -> str:
        """The word, from the evidence by :func:`fedcompanion.verdict.decide`."""
        return decide(self.evidence, self.reconstruction)


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
    """Where the notebooks' summaries live: <results_dir>/summaries."""
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
    """Every notebook's summary in ``results_dir`` (files starting with _ are bookkeeping, not summaries)."""
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
    """The machine, in one line, as the report names it."""
    from .experiments import RUN_THREADS
    from .machine import describe

    return f"{describe()}, {RUN_THREADS} torch thread(s) per run and per notebook kernel"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claims_table(summaries: list[Summary]) -> str:
    """The site's table: each claim's word (from the rule), the number of evaluation seeds behind it and where it
    holds; the effects and intervals are in REPRODUCTION.md."""
    rows = ["| paper | claim | verdict | n | where it holds and where not | notebook |", "|---|---|---|---|---|---|"]
    for paper in PAPERS:
        for s in summaries:
            for c in s.claims:
                if c.paper != paper:
                    continue
                rows.append(f"| {paper} | {_escape(c.claim)} | **{c.verdict}** | {_seeds(c)} | "
                            f"{_escape(explain(c.evidence))} | `{s.notebook}` |")
    return "\n".join(rows)


def tally(claims) -> dict[str, int]:
    """How many of ``claims`` got each verdict word, in the rule's order (words no claim got left out)."""
    counts = {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
    return {v: n for v, n in counts.items() if n}


def verdict_counts(summaries: list[Summary], timings: dict | None = None) -> str:
    """README's summary: per paper, how many claims got each word (REPRODUCTION.md has every claim with its effect,
    interval and n), and the wall time of the reproduction that computed them, where one was recorded."""
    words = list(tally([c for s in summaries for c in s.claims]))
    rows = ["| paper | claims | " + " | ".join(words) + " |", "|---" * (len(words) + 2) + "|"]
    for paper in [*PAPERS, None]:
        claims = [c for s in summaries for c in s.claims if paper is None or c.paper == paper]
        if claims:
            counts = tally(claims)
            rows.append(f"| {paper or '**all**'} | {len(claims)} | "
                        + " | ".join(str(counts.get(v, "")) for v in words) + " |")
    elapsed = (timings or {}).get("elapsed")
    if elapsed is not None:
        rows += ["", f"The committed results took {elapsed / 60:.1f} minutes of `make reproduce` from an empty cache "
                     f"({timings.get('machine', 'machine not recorded')})."]
    return "\n".join(rows)


def _seeds(claim: Claim) -> str:
    """The evaluation seeds behind a claim's seeded evidence ("exact" for identities and deterministic runs)."""
    ns = sorted({e.n for e in claim.evidence if e.kind in ("paired", "against") and not e.deterministic})
    if not ns:
        return "exact" if any(e.kind != "untestable" for e in claim.evidence) else ""
    return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


def provenance(results_dir: str | Path) -> dict[tuple[str, str, str], int]:
    """How many cached runs each numerical platform computed: (CPU, kernels and BLAS, torch) -> runs."""
    counts: dict[tuple[str, str, str], int] = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        p = json.loads(path.read_text()).get("platform") or {}
        key = (p.get("cpu", "?"), f"{p.get('cpu_capability', '?')}, {p.get('blas', '?')}", p.get("torch", "?"))
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def read_history(results_dir: str | Path) -> dict:
    """``_history.json``: earlier verdict words by claim id (``{"from": ..., "claims": {id: {"previous": word,
    "why": sentence}}}``): what the report's history section sets beside the current words."""
    path = summaries_dir(results_dir) / "_history.json"
    return json.loads(path.read_text()) if path.exists() else {"claims": {}}


def render(results_dir: str | Path = "results") -> str:
    """REPRODUCTION.md from the summaries in ``results_dir`` (deterministic: the same files, the same text)."""
    summaries = load_summaries(results_dir)
    timings = read_timings(results_dir)
    profiles = sorted({s.profile for s in summaries})
    lines = [
        "# Reproduction report",
        "",
        "Generated by `make reproduce` (or `fedcompanion report`) from the summaries the notebooks write to "
        "`results/summaries/`; do not edit by hand. Every number below comes from the runs in `results/`, and every "
        "verdict from the rule in `fedcompanion.verdict` applied to the evidence each claim stores.",
        "",
        f"Profile: {', '.join(profiles) or 'none'}. Machine: {timings.get('machine', '?')}.",
        "",
        f"![Every seeded comparison behind a verdict](figures/{FOREST}.png)",
        "",
        "## The verdict rule",
        "",
        "Each claim declares its evidence: per-seed paired differences (method minus baseline, signed so that > 0 is "
        "the claimed direction), a comparison with a fixed reference, or an exact identity with its tolerance. For "
        "seeded evidence the effect is the mean difference with a 95% Student-t interval and a paired t-test: "
        "**reproduces** if the interval lies above 0, **tie** if it contains 0, **does not reproduce** if it lies "
        "below 0 (\"not worse\" evidence, e.g. equivalent fairness, holds on a tie). A claim **reproduces** when "
        "every item holds, is **partly** when some hold (the settings are named), a **tie** or **does not "
        "reproduce** when none does. Comparative claims use at least 5 evaluation seeds, tuned on other seeds.",
        "",
        "## Papers",
        "",
    ]
    lines += [f"* **{key}**: {title}" for key, title in PAPERS.items()]
    counts = tally([c for s in summaries for c in s.claims])
    lines += ["", "## Verdicts at a glance", "",
              ", ".join(f"{n} {v}" for v, n in counts.items()) + ".", "", "## Claims", ""]
    for paper in PAPERS:
        claims = [(s, c) for s in summaries for c in s.claims if c.paper == paper]
        if not claims:
            continue
        lines += [f"### {paper}", ""]
        for s, c in claims:
            figures = ", ".join(f"[`{f}`](figures/{f}.png)" for f in c.figures) or "none"
            lines += [f"#### {c.claim}", "", f"* **Verdict: {c.verdict}** ({explain(c.evidence)})."]
            lines += [f"  * {e.describe()}" for e in c.evidence]
            if c.numbers:
                lines.append(f"* Measured: {c.numbers}")
            lines.append(f"* Figure: {figures}; notebook `notebooks/{s.notebook}.ipynb`; claim id `{c.id}`.")
            if c.settings:
                lines.append(f"* Settings: {c.settings}")
            if c.deviations:
                lines.append(f"* Deviations from the paper: {c.deviations}")
            lines.append("")
    lines += _tuning_section(summaries)
    from .arena import markdown as arena_markdown  # (the arena's section: notebook 92, when it has run)

    lines += next((arena_markdown(s.checks["arena"]) for s in summaries if "arena" in s.checks), [])
    diverged = [(s.notebook, d) for s in summaries for d in s.diverged]
    lines += ["## Runs that diverged", "", f"{len(diverged)} run(s), tuning runs included.", ""]
    if diverged:
        lines += [f"* `{nb}`: {d.get('label', '?')} (seed {d.get('seed', '?')}{_role(d)}) diverged at round "
                  f"{d.get('round', '?')}; " + ("a diverged tuning setting is never chosen." if d.get("role") ==
                                               "tuning" else "shown as diverged in the figure, left out of its mean "
                                               "curve and counted against its method in the verdict.")
                  for nb, d in diverged]
    history = read_history(results_dir)
    now = {c.id: c.verdict for s in summaries for c in s.claims}
    changed = {k: v for k, v in history.get("claims", {}).items() if k in now}
    if changed:
        lines += ["", "## History of the verdicts", "",
                  f"The words before the statistical rule ({history.get('from', 'earlier')}) beside the words now.",
                  "", "| claim | before | now | what changed |", "|---|---|---|---|"]
        lines += [f"| `{k}` | {v['previous']} | **{now[k]}** | {_escape(v.get('why', ''))} |"
                  for k, v in changed.items()]
    lines += ["", "## Where the runs were computed", "", "Each run stores the numerical platform that computed it "
              "(float32's last bits depend on it); the wall times below are those of the last reproduction from an "
              "empty cache, on the machine named at the top.", "", "| runs | CPU | kernels, BLAS | torch |",
              "|---|---|---|---|"]
    lines += [f"| {n} | {cpu} | {kernels} | {torch} |" for (cpu, kernels, torch), n in provenance(results_dir).items()]
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


def _tuning_section(summaries: list[Summary]) -> list[str]:
    """Default against best for every tuned method (``checks["tuned"]`` of the notebooks that tune by
    :func:`fedcompanion.experiments.tune`): its default setting and score, the tuned one and its score, the grid."""
    rows = [(s.notebook, m, t) for s in summaries for m, t in s.checks.get("tuned", {}).items() if "default" in t]
    if not rows:
        return []
    from .experiments.tuning import format_setting as show

    lines = ["## Tuning: default against best", "",
             "Every method by the same protocol (`fedcompanion.experiments.tune`); the score is the notebook's tuning "
             "score, the mean over its tuning seeds.", "",
             "| notebook | method | default | its score | tuned | its score | grid |", "|---|---|---|---|---|---|---|"]
    for nb, m, t in rows:
        grid = "; ".join(f"{k}: " + ", ".join(f"{v:g}" for v in g) for k, g in t["grid"].items())
        edge = f" (chosen at an edge: {', '.join(t['at_edge'])})" if t["at_edge"] else ""
        lines.append(f"| `{nb}` | {m} | {show(t['default'])} | {t['default_score']:.4f} | {show(t['value'])} | "
                     f"{t['score']:.4f} | {grid}{edge} |")
    return lines + [""]


def _role(d: dict) -> str:
    if d.get("role") != "tuning":
        return ""
    from .experiments.tuning import format_setting

    setting = format_setting(d.get("setting", {}))
    return f", tuning at {setting}" if setting else ", tuning"


README_START, README_END = "<!-- claims:start -->", "<!-- claims:end -->"


def update_readme(readme: Path, results_dir: str | Path) -> bool:
    """Replace README's generated verdict summary (between the markers); returns whether it changed."""
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no {README_START} ... {README_END} section")
    table = verdict_counts(load_summaries(results_dir), read_timings(results_dir))
    new = re.sub(f"{re.escape(README_START)}.*?{re.escape(README_END)}",
                 lambda _: f"{README_START}\n{table}\n{README_END}", text, flags=re.S)
    if new != text:
        write_atomic(readme, new)
    return new != text


class NoSummaries(FileNotFoundError):
    """The results folder holds no notebook summaries: there is nothing to report (and nothing is written)."""


def write_report(results_dir: str | Path = ROOT / "results", output: Path = ROOT / "REPRODUCTION.md",
                 readme: Path | None = ROOT / "README.md", figures: Path | None = None) -> Path:
    """Write REPRODUCTION.md, its forest plot (in ``figures``, by default ``figures/`` beside the report) and
    README's claims table from the summaries in ``results_dir``, each file atomically; raises
    :class:`NoSummaries` (writing nothing) where there are none."""
    if not load_summaries(results_dir):
        raise NoSummaries(f"no notebook summaries in {summaries_dir(results_dir)}: run the notebooks "
                          "(make reproduce) first, or point --results at a results folder")
    write_atomic(output, render(results_dir))
    write_forest(load_summaries(results_dir), Path(figures) if figures else Path(output).parent / "figures", PAPERS)
    if readme is not None and readme.exists() and README_START in readme.read_text():
        update_readme(readme, results_dir)
    return output
