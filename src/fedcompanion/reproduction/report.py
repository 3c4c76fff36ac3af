"""The reproduction report: each notebook records its checked claims (:mod:`fedcompanion.reproduction.claims.record`);
``REPRODUCTION.md`` and README's table are generated from those records, never typed by hand.

A notebook ends with :func:`~fedcompanion.reproduction.claims.record.record`, which writes
``<results>/summaries/<notebook>.json``: for every claim of the paper that the notebook tests, the claim in one line,
the figure, the measured numbers (mean and spread over seeds), the verdict, the settings and the deviations from the
paper, plus the runs that diverged. ``make reproduce`` adds the wall time of each notebook (``_timings.json``) and ends
with :func:`write_report`.
"""
from __future__ import annotations

import functools
import logging
import re
from pathlib import Path

from ..infra.atomic import field as _field
from ..infra.atomic import read_json, write_atomic
from ..validation import ConfigError
from .claims.record import (  # noqa: F401  (a notebook's record cell imports them from here)
    PAPERS,
    Claim,
    Recorded,
    Summary,
    anchor,
    escape_cell,
    load_summaries,
    plain,
    read_summary,
    record,
    summaries_dir,
    table_head,
    whole_of,
)
from .rule.claim import explain
from .rule.item import MIN_DRAWS, MIN_SEEDS, VERDICTS
from .timings import read_timings
from .verdict_figures import CHART, FOREST, paper_figure, write_verdict_figures

ROOT = Path(__file__).resolve().parents[3]


def claims_table(summaries: list[Summary]) -> str:
    """The site's table: each claim's word (from the rule), the number of evaluation seeds behind it and where it
    holds; the effects and intervals are in REPRODUCTION.md."""
    rows = table_head(["paper", "claim", "verdict", "n", "where it holds and where not", "notebook"])
    for paper in PAPERS:
        for s in summaries:
            for c in s.claims:
                if c.paper != paper:
                    continue
                rows.append(f"| {paper} | {escape_cell(c.claim)} | **{c.verdict}** | {_seeds(c)} | "
                            f"{escape_cell(c.explain())} | `{s.notebook}` |")
    return "\n".join(rows)


def tally(claims) -> dict[str, int]:
    """How many of ``claims`` got each verdict word, in the rule's order (words no claim got left out)."""
    counts = {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
    return {v: n for v, n in counts.items() if n}


GROUPS = (("performance", "the papers' comparative performance claims (and our extensions of them)"),
          ("facts", "identities, theorems and structural facts"))


def group_of(claim: Claim) -> str:
    """``performance`` or ``facts`` (identities, theorems, mechanisms), as :mod:`fedcompanion.reproduction.papers`
    declares the claim's kind (an undeclared claim counts as performance: it is never mistaken for a proof)."""
    d = claim.declared
    return "facts" if d is not None and d.kind != "performance" else "performance"


def verdict_counts(summaries: list[Summary], timings: dict | None = None) -> str:
    """README's summary: the papers' comparative performance claims apart from identities, theorems and
    structural facts, per paper: how many claims got each word, and how many hold an item that is significantly
    reversed (in any setting); then the wall time of the reproduction that computed them, where one was recorded."""
    every = [c for s in summaries for c in s.claims]
    words = list(tally(every))
    rows = table_head(["claims", "paper", "n", *words, "with a reversed item"])
    def row(title: str, paper: str, claims: list) -> str:
        counts = tally(claims)
        return (f"| {title} | {paper} | {len(claims)} | " + " | ".join(str(counts.get(v, "")) for v in words)
                + f" | {sum(c.reversed_items() > 0 for c in claims) or ''} |")

    for group, title in GROUPS:
        for paper in [*PAPERS, None]:
            claims = [c for c in every if group_of(c) == group and (paper is None or c.paper == paper)]
            if claims:
                rows.append(row(title, paper or "**all**", claims))
                title = ""
    rows.append(row("every claim", "**all**", every))
    elapsed = (timings or {}).get("elapsed")
    if elapsed is not None:
        pool = {None: "", "local": " with `--scheduler local` (one Dask cluster of the machine's cores for every "
                "notebook)"}.get(timings.get("pool"), f" with its runs on {timings.get('pool')}")
        rows += ["", f"The last `make reproduce` from an empty cache{pool} took {elapsed / 60:.1f} minutes "
                     f"({timings.get('machine', 'machine not recorded')}); REPRODUCTION.md names the platform that "
                     "computed each committed run." + (f" Since that measurement: {timings['since']}." if
                                                       timings.get("since") else "")]
    warm = (timings or {}).get("warm") or {}
    if warm.get("elapsed") is not None:
        rows += ["", f"A fresh clone's `make html` (every notebook from the committed results, then the site) took "
                     f"{(warm['elapsed'] + warm.get('site', 0)) / 60:.1f} minutes ({warm.get('machine', '?')}; "
                     "`python benchmarks/fresh_clone.py`)."]
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
    from ..experiments.tuning import format_setting as show
    from .arena import markdown as arena_markdown  # (notebook 92's section, once it has run)

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
        profiles=sorted({s.profile for s in summaries}), machine=timings.get("machine", "?"),
        charts=[(p, paper_figure(CHART, p)) for p in PAPERS], forests=[(p, paper_figure(FOREST, p)) for p in PAPERS],
        papers=PAPERS, counts=tally([c for s in summaries for c in s.claims]), explain=explain,
        min_seeds=MIN_SEEDS, min_draws=MIN_DRAWS, zip=zip,
        anchor=anchor,
        claims_by_paper=[(paper, claims) for paper, claims in by_paper if claims], tuned=tuned, arena=arena,
        diverged=diverged, now=now,
        passes=[(one.get("name") or f"pass {k + 1}", one.get("from", "earlier")) for k, one in enumerate(history)],
        changed=[dict(id=c, since=one.get("name") or f"pass {k + 1}", previous=v["previous"],
                      why=escape_cell(v.get("why", "")))
                 for k, one in enumerate(history) for c, v in one["claims"].items() if c in now],
        provenance=provenance(results_dir), summaries=summaries, seconds=timings.get("notebooks", {}),
        wall={s.notebook: _wall_cell(s.notebook, timings.get("notebooks", {})) for s in summaries},
        elapsed=timings.get("elapsed"), parallel=timings.get("parallel"), pool=timings.get("pool"),
        figures=sorted({f for s in summaries for c in s.claims for f in c.figures}))
    return text.rstrip() + "\n"


def shown_arena(summaries: list[Summary]) -> Summary | None:
    """The arena a report shows: the arena summary with the most tasks (the whole arena, ``92_arena``, once `make
    arena` has run, else the part `make reproduce` runs), ``None`` if the arena notebook has not run."""
    from .arena import NOTEBOOK

    arenas = [s for s in summaries if "arena" in s.checks]
    return max(arenas, key=lambda s: (len(s.checks["arena"]), s.notebook == NOTEBOOK), default=None)


def _wall_cell(name: str, seconds: dict[str, float], unit: str = "") -> str:
    """A time table's cell (the report's, README's): the notebook's seconds, or its part's with the part named, or
    nothing."""
    timed = wall_time(name, seconds)
    if timed is None:
        return ""
    return f"{timed[0]:.0f}{unit}" + (f" (its part `{timed[1]}`)" if timed[1] else "")


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
    environment.filters.update(plain=plain, cell=escape_cell)  # a claim's own text: no markup, no table break
    return environment.get_template(name)


def _role(d: dict) -> str:
    if d.get("role") != "tuning":
        return ""
    from ..experiments.tuning import format_setting

    setting = format_setting(d.get("setting", {}))
    return f", tuning at {setting}" if setting else ", tuning"


README_START, README_END = "<!-- claims:start -->", "<!-- claims:end -->"


def update_readme(readme: Path, results_dir: str | Path) -> bool:
    """Replace README's generated verdict summary (between the markers); returns whether it changed."""
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no {README_START} ... {README_END} section")
    timings = read_timings(results_dir)
    table = verdict_counts(load_summaries(results_dir), timings)
    new = re.sub(f"{re.escape(README_START)}.*?{re.escape(README_END)}",
                 lambda _: f"{README_START}\n{table}\n{README_END}", text, flags=re.S)
    new = with_costs(new, timings.get("notebooks", {}), timings.get("warm", {}).get("notebooks", {}))
    if new != text:
        write_atomic(readme, new)
    return new != text


def wall_time(name: str, seconds: dict[str, float]) -> tuple[float, str | None] | None:
    """A notebook's recorded wall time and ``None``, or where only a part of it ran in `make reproduce`
    (``92_arena-qsar``, ``adafedadam/03_adafedadam-b``) the part's time and name; ``None`` if neither was timed."""
    if name in seconds:
        return seconds[name], None
    part = next((k for k in sorted(seconds) if k != name and whole_of(k) == name), None)
    return (seconds[part], part) if part else None


NOTEBOOK_HEADER = "| notebook | what it shows | run by |"
COST = "wall time: empty cache; from the committed results"


def with_costs(text: str, seconds: dict[str, float], warm: dict[str, float] | None = None) -> str:
    """README's notebook table (the rows under :data:`NOTEBOOK_HEADER`) with its last column: each notebook's wall
    time in the last `make reproduce` from an empty cache (``_timings.json``; a part's where `make reproduce` runs only
    a part: the arena's QSAR panel, AdaFedAdam's setting B), two notebooks at a time, the notebooks of the other
    targets timed in docs/benchmarks.md; then its time from the committed results on a fresh clone (``warm``:
    `make html`, ``benchmarks/fresh_clone.py``)."""
    def cost(name: str) -> str:
        cold = _wall_cell(name, seconds, " s") or "not in `make reproduce` (docs/benchmarks.md)"
        return f"{cold}; {warm[name]:.0f} s" if name in (warm or {}) else cold

    out, table = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith(NOTEBOOK_HEADER):
            line, table = f"{NOTEBOOK_HEADER} {COST} |\n", True
        elif table and line.startswith(table_head([""])[1]):
            line = table_head(["", "", "", ""])[1] + "\n"
        elif table and line.startswith("| `"):
            cells = line.rstrip("\n").strip("|").split("|")[:3]
            line = "|" + "|".join(cells) + f"| {cost(cells[0].strip().strip('`'))} |\n"
        else:
            table = False
        out.append(line)
    return "".join(out)


def orphans(summaries: list[Summary], folder: Path = ROOT / "notebooks") -> list[tuple[str, int]]:
    """(name, claims) of each summary whose notebook is not in ``folder`` (a part, ``92_arena-qsar``, belongs to
    ``92_arena``): what a renamed notebook leaves behind."""
    return [(s.notebook, len(s.claims)) for s in summaries
            if not (folder / f"{whole_of(s.notebook)}.ipynb").exists()]


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
    for summary, claims in orphans(load_summaries(results_dir, superseded=True)):
        logging.getLogger(__name__).warning(
            "%s: notebook %r is not under notebooks/ (renamed or removed?): its %d claim(s) are in the report; "
            "delete the summary if it is stale", summaries_dir(results_dir), summary, claims)
    write_atomic(output, render(results_dir))
    write_verdict_figures(load_summaries(results_dir), Path(figures) if figures else Path(output).parent / "figures",
                          PAPERS)
    if readme is not None and readme.exists() and README_START in readme.read_text():
        update_readme(readme, results_dir)
    return output
