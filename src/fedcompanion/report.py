"""The reproduction report: each notebook records its checked claims; ``REPRODUCTION.md`` and README's table
are generated from those records, never typed by hand.

A notebook ends with :func:`record`, which writes ``<results>/summaries/<notebook>.json``: for every claim of the
paper that the notebook tests, the claim in one line, the figure, the measured numbers (mean and spread over
seeds), the verdict, the settings and the deviations from the paper, plus the runs that diverged. ``make
reproduce`` adds the wall time of each notebook (``_timings.json``) and ends with :func:`write_report`.
"""
from __future__ import annotations

import functools
import json
import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .atomic import DamagedFile, read_json, write_atomic
from .atomic import field as _field
from .decision import decide, explain, words
from .forest import CHART, FOREST, write_verdict_figures
from .timings import read_timings
from .validation import ConfigError
from .verdict import VERDICTS, Evidence, from_dict

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
        controls: the test applied to what the claim excludes; unless each is rejected, "not testable here".
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
    controls: list = field(default_factory=list)

    def __post_init__(self):
        if self.paper not in PAPERS:
            raise ValueError(f"paper must be one of {list(PAPERS)}, got {self.paper!r}")
        self.evidence, self.controls = ([e if isinstance(e, Evidence) else from_dict(e) for e in items]
                                        for items in (self.evidence, self.controls))
        if not self.evidence:
            raise ValueError(f"claim {self.id!r} has no evidence: the verdict rule needs at least one item")

    @property
    def verdict(self) -> str:
        """The word, from the evidence by :func:`fedcompanion.decision.decide`."""
        return decide(self.evidence, self.reconstruction, self.controls)

    def explain(self) -> str:
        """Where it holds and where not, and its controls (:func:`fedcompanion.decision.explain`)."""
        return explain(self.evidence, self.controls)

    def items(self) -> list[tuple[str, Evidence]]:
        """Each item with its word within the claim (Holm-adjusted, :func:`fedcompanion.decision.words`), in short:
        ``holds``, ``tie``, ``reversed`` or ``not testable``."""
        short = {"reproduces": "holds", "tie": "tie", "not testable here": "not testable"}
        return [(short.get(w, "reversed"), e) for w, e in zip(words(self.evidence), self.evidence)]

    def held(self) -> str:
        """``k of n items hold`` (n: the testable items)."""
        items = self.items()
        testable = [w for w, _ in items if w != "not testable"]
        n = len(testable)
        return f"{testable.count('holds')} of {n} item{'s hold' if n != 1 else ' holds'}"


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


@dataclass(frozen=True)
class Recorded:
    """What :func:`record` returns: the summary's ``path`` (it is a path-like object) and, as a notebook's last
    output, the verdicts it records: each claim's word, where it holds, and each item's effect and interval."""

    path: Path
    summary: Summary

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        out = [f"{self.summary.title} ({self.summary.profile} profile; summary {self.path})"]
        for c in self.summary.claims:
            out += [f"{c.id}: {c.verdict} ({c.explain()})"] + [f"    {e.describe()}" for e in c.evidence]
        return "\n".join(out)

    def _repr_markdown_(self) -> str:
        out = [f"**Verdicts** ({self.summary.profile} profile; by the rule of `fedcompanion.decision`; each claim's "
               "entry in REPRODUCTION.md defines the words):", "", "| claim | verdict | items |", "|---|---|---|"]
        report = "../" * (self.summary.notebook.count("/") + 1) + "REPRODUCTION.md"  # from notebooks/<name>.ipynb
        out += [f"| {_escape(c.claim)} (`{c.id}`, [report]({report}#{anchor(c.id)})) | **{c.verdict}** "
                f"| {c.held()} |" for c in self.summary.claims]
        for c in self.summary.claims:
            out += ["", f"`{c.id}`:"] + [f"* {w}: {_escape(e.describe())}" for w, e in c.items()]
            out += [f"* control (the test must reject it): {_escape(e.describe())}" for e in c.controls]
        return "\n".join(out)


def anchor(claim_id: str) -> str:
    """The HTML anchor of a claim's entry in REPRODUCTION.md (``fedvra.fig3.faster`` -> ``fedvra-fig3-faster``)."""
    return claim_id.replace(".", "-")


def record(notebook: str, title: str, claims: list[Claim], results_dir: str | Path, profile: str,
           diverged: list[dict] | None = None, runs: int = 0, checks: dict | None = None) -> Recorded:
    """Write a notebook's summary (atomically) and return it as :class:`Recorded` (its path, and its verdicts as
    the notebook's last output). ``checks`` holds facts the tests read back from the committed results (e.g. where
    each tuned value lies in its grid)."""
    if not notebook or notebook.startswith("_"):
        raise ValueError(f"record: notebook {notebook!r} must be a notebook's name; names starting with _ are the "
                         "reproduction's bookkeeping files (_timings, _history)")
    summary = Summary(notebook, title, profile, claims, diverged or [], runs, checks or {})
    folder = summaries_dir(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (notebook.replace("/", "--") + ".json")
    return Recorded(write_atomic(path, json.dumps(asdict(summary), indent=1, sort_keys=True) + "\n"), summary)


def load_summaries(results_dir: str | Path) -> list[Summary]:
    """Every notebook's summary in ``results_dir`` (files starting with _ are bookkeeping, not summaries)."""
    folder = summaries_dir(results_dir)
    return [read_summary(path) for path in sorted(folder.glob("*.json")) if not path.name.startswith("_")]


_CLAIM_FIELDS = {"id": (str,), "paper": (str,), "claim": (str,), "figures": (list,), "evidence": (list,),
                 "numbers": (str,), "settings": (str,), "deviations": (str,), "reconstruction": (bool,),
                 "controls": (list,)}
_TUNED_FIELDS = {"default": (dict,), "default_score": (float,), "value": (dict,), "score": (float,),
                 "at_edge": (list,), "grid": (dict,)}


def read_summary(path: Path) -> Summary:
    """One notebook's summary, every field the report reads checked (:class:`~fedcompanion.atomic.DamagedFile`
    names the file and the field)."""
    data = read_json(path, "notebook summary")
    for name, kinds in (("notebook", (str,)), ("title", (str,)), ("profile", (str,)), ("claims", (list,)),
                        ("diverged", (list,)), ("runs", (int,)), ("checks", (dict,))):
        _field(data, name, kinds, path, default=None if name in ("diverged", "runs", "checks") else ...)
    unknown = sorted(set(data) - {f.name for f in Summary.__dataclass_fields__.values()})
    if unknown:
        raise DamagedFile(f"{path}: unknown field(s) {unknown} in a notebook summary")
    claims = []
    for i, c in enumerate(data["claims"]):
        where = f"claims[{i}]"
        for name, kinds in _CLAIM_FIELDS.items():
            _field(c, name, kinds, path, where=where, default=None if name not in ("id", "paper", "evidence") else ...)
        try:
            claims.append(Claim(**c))
        except (TypeError, ValueError) as exc:
            raise DamagedFile(f"{path}: {where} (claim {c.get('id')!r}) is not a claim the rule can read: {exc}") \
                from None
    for method, t in (data.get("checks") or {}).get("tuned", {}).items():
        if isinstance(t, dict) and "default" in t:
            for name, kinds in _TUNED_FIELDS.items():
                _field(t, name, kinds, path, where=f"checks.tuned.{method}")
    return Summary(**{**data, "claims": claims})


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
                            f"{_escape(c.explain())} | `{s.notebook}` |")
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
        rows += ["", f"The last `make reproduce` from an empty cache took {elapsed / 60:.1f} minutes "
                     f"({timings.get('machine', 'machine not recorded')}); REPRODUCTION.md names the platform that "
                     "computed each committed run."]
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
        p = _field(read_json(path, "run record"), "platform", (dict, type(None)), path, default=None) or {}
        key = (p.get("cpu", "?"), f"{p.get('cpu_capability', '?')}, {p.get('blas', '?')}", p.get("torch", "?"))
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def read_history(results_dir: str | Path) -> list[dict]:
    """``_history.json``: the passes that changed verdict words, oldest first, each ``{"name": a short name,
    "from": what the earlier words were, "claims": {id: {"previous": word, "why": sentence}}}`` (the file holds
    ``{"passes": [...]}``, or one pass as its top level): what the report's history section sets beside the current
    words."""
    path = summaries_dir(results_dir) / "_history.json"
    if not path.exists():
        return []
    data = read_json(path, "verdict history")
    passes = _field(data, "passes", (list,), path, default=None)
    out = []
    for k, one in enumerate(passes if passes is not None else [data]):
        where = f"passes[{k}]" if passes is not None else ""
        _field(one, "from", (str,), path, default="earlier", where=where)
        _field(one, "name", (str,), path, default=f"pass {k + 1}", where=where)
        for claim, entry in _field(one, "claims", (dict,), path, where=where).items():
            _field(entry, "previous", (str,), path, where=f"{where}.claims.{claim}".lstrip("."))
            _field(entry, "why", (str,), path, where=f"{where}.claims.{claim}".lstrip("."), default="")
        out.append(one)
    return out


def render(results_dir: str | Path = "results") -> str:
    """REPRODUCTION.md from the summaries in ``results_dir`` (deterministic: the same files, the same text): the
    numbers gathered here, the layout in ``templates/reproduction.md.j2``."""
    from .arena import markdown as arena_markdown  # (notebook 92's section, once it has run)
    from .experiments.tuning import format_setting as show

    summaries = load_summaries(results_dir)
    timings = read_timings(results_dir)
    history = read_history(results_dir)
    now = {c.id: c.verdict for s in summaries for c in s.claims}
    by_paper = [(paper, [(s, c) for s in summaries for c in s.claims if c.paper == paper]) for paper in PAPERS]
    tuned = [dict(notebook=s.notebook, method=m, default=show(t["default"]), default_score=t["default_score"],
                  value=show(t["value"]), score=t["score"], at_edge=t["at_edge"],
                  grid="; ".join(f"{k}: " + ", ".join(f"{v:g}" for v in g) for k, g in t["grid"].items()))
             for s in summaries for m, t in s.checks.get("tuned", {}).items() if "default" in t]
    whole = shown_arena(summaries)
    diverged = [dict(notebook=s.notebook, label=d.get("label", "?"), seed=d.get("seed", "?"), role=_role(d),
                     round=d.get("round", "?"), tuning=d.get("role") == "tuning")
                for s in summaries if not _inside(s, whole) for d in s.diverged]
    arena = "\n".join(arena_markdown(whole.checks["arena"], whole.notebook)) if whole else ""
    text = _template("reproduction.md.j2").render(
        profiles=sorted({s.profile for s in summaries}), machine=timings.get("machine", "?"), forest=FOREST,
        chart=CHART, papers=PAPERS, counts=tally([c for s in summaries for c in s.claims]), explain=explain,
        anchor=anchor,
        claims_by_paper=[(paper, claims) for paper, claims in by_paper if claims], tuned=tuned, arena=arena,
        diverged=diverged, now=now,
        passes=[(one.get("name") or f"pass {k + 1}", one.get("from", "earlier")) for k, one in enumerate(history)],
        changed=[dict(id=c, since=one.get("name") or f"pass {k + 1}", previous=v["previous"],
                      why=_escape(v.get("why", "")))
                 for k, one in enumerate(history) for c, v in one["claims"].items() if c in now],
        provenance=provenance(results_dir), summaries=summaries, seconds=timings.get("notebooks", {}),
        elapsed=timings.get("elapsed"), parallel=timings.get("parallel"),
        figures=sorted({f for s in summaries for c in s.claims for f in c.figures}))
    return text.rstrip() + "\n"


def shown_arena(summaries: list[Summary]) -> Summary | None:
    """The arena a report shows: the arena summary with the most tasks (the whole arena, ``92_arena``, once `make
    arena` has run, else the part `make reproduce` runs), ``None`` if the arena notebook has not run."""
    from .arena import NOTEBOOK

    arenas = [s for s in summaries if "arena" in s.checks]
    return max(arenas, key=lambda s: (len(s.checks["arena"]), s.notebook == NOTEBOOK), default=None)


def _inside(part: Summary, whole: Summary | None) -> bool:
    """Whether ``part`` is a part of the arena whose tasks ``whole`` (the arena shown) holds too: its diverged runs
    are the whole's own (the same configurations), listed once."""
    return (whole is not None and part is not whole and "arena" in part.checks
            and set(part.checks["arena"]) <= set(whole.checks["arena"]))


@functools.cache
def _template(name: str):
    """A Jinja2 template of ``templates/`` (Markdown: nothing escaped; a line holding only a tag leaves no line)."""
    import jinja2

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                                     trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                     undefined=jinja2.StrictUndefined, autoescape=False)
    return environment.get_template(name)


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


def orphans(summaries: list[Summary], folder: Path = ROOT / "notebooks") -> list[tuple[str, int]]:
    """(name, claims) of each summary whose notebook is not in ``folder`` (a part, ``92_arena-qsar``, belongs to
    ``92_arena``): what a renamed notebook leaves behind."""
    return [(s.notebook, len(s.claims)) for s in summaries
            if not (folder / f"{s.notebook.split('-')[0]}.ipynb").exists()]


class NoSummaries(FileNotFoundError):
    """The results folder holds no notebook summaries: there is nothing to report (and nothing is written)."""


def write_report(results_dir: str | Path = ROOT / "results", output: Path = ROOT / "REPRODUCTION.md",
                 readme: Path | None = ROOT / "README.md", figures: Path | None = None) -> Path:
    """Write REPRODUCTION.md, its forest plot (in ``figures``, by default ``figures/`` beside the report) and
    README's claims table from the summaries in ``results_dir``, each file atomically; raises
    :class:`NoSummaries` (writing nothing) where there are none."""
    if Path(output).exists() and README_START in Path(output).read_text(encoding="utf-8", errors="replace"):
        raise ConfigError(f"{output} holds README's claims table (a front page, not a report): the report would "
                          "replace it; write the report elsewhere (--output REPRODUCTION.md) and let --readme "
                          "update the table")
    if not load_summaries(results_dir):
        raise NoSummaries(f"no notebook summaries in {summaries_dir(results_dir)}: run the notebooks "
                          "(make reproduce) first, or point --results at a results folder")
    for summary, claims in orphans(load_summaries(results_dir)):
        logging.getLogger(__name__).warning(
            "%s: notebook %r is not under notebooks/ (renamed or removed?): its %d claim(s) are in the report; "
            "delete the summary if it is stale", summaries_dir(results_dir), summary, claims)
    write_atomic(output, render(results_dir))
    write_verdict_figures(load_summaries(results_dir), Path(figures) if figures else Path(output).parent / "figures",
                          PAPERS)
    if readme is not None and readme.exists() and README_START in readme.read_text():
        update_readme(readme, results_dir)
    return output
