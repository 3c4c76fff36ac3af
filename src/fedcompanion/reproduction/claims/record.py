"""A notebook's claims as data: each claim of a paper with the evidence its verdict is computed from
(:class:`Claim`), the notebook's summary file (:func:`record` writes it, :func:`load_summaries` reads every one back,
each field checked), and what a notebook shows as its last output (:class:`Recorded`). The report
(:mod:`fedcompanion.reproduction.report`) renders them.
"""
from __future__ import annotations

import html
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...infra.atomic import DamagedFile, read_json, write_atomic
from ...infra.atomic import field as _field
from ..papers import declared
from ..rule.claim import control_outcomes, counts, decide, explain, fragility, notes, same_outcomes, split, words
from ..rule.item import Evidence, from_dict

PAPERS = {
    "FedVRA": "Wang et al., *Beyond ADMM: a unified client-variance-reduced adaptive FL framework* (AAAI 2023)",
    "CEADMM": "Zhou & Li, *Communication-efficient ADMM-based federated learning*",
    "AdaFedAdam": "Ju et al., *Accelerating fair federated learning: adaptive federated Adam* (IEEE TMLCN 2024)",
}


@dataclass
class Claim:
    """One claim of a paper, as a notebook tested it; its verdict is computed from ``evidence`` by the package's rule
    (:mod:`fedcompanion.reproduction.rule.item`), never written by hand.

    Attributes:
        id: stable identifier, e.g. ``fedvra.fig2.dual_stepsize``.
        paper: ``FedVRA``, ``CEADMM`` or ``AdaFedAdam``.
        claim: the claim in one line.
        figures: the figure files (names in ``figures/``, without extension) that test it.
        evidence: the items the rule decides on (:class:`~fedcompanion.reproduction.rule.item.Evidence`, or their
            dicts as stored).
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
    def declared(self):
        """What the package declares about this claim (:mod:`fedcompanion.reproduction.papers`: its kind, its place in
        the paper, the paper's own settings), or ``None``."""
        return declared(self.id)

    def _own(self):
        d = self.declared
        return d.is_own if d is not None and d.own else None

    @property
    def verdict(self) -> str:
        """The word, from the evidence by :func:`fedcompanion.reproduction.rule.claim.decide` (from the paper's own
        settings where they are declared)."""
        return decide(self.evidence, self.reconstruction, self.controls, self._own())

    def explain(self) -> str:
        """Where it holds and where not, and its controls (:func:`fedcompanion.reproduction.rule.claim.explain`)."""
        return explain(self.evidence, self.controls, self._own())

    def items(self) -> list[tuple[str, Evidence]]:
        """Each item with its word within the claim (Holm-adjusted, :func:`fedcompanion.reproduction.rule.claim.words`),
        in short: ``holds``, ``reversed``, ``equivalent``, ``inconclusive`` or ``not testable``; an item of one of our
        settings (where the paper's own are declared) says so."""
        short = {"reproduces": "holds", "does not reproduce": "reversed", "not testable here": "not testable"}
        ours = split(self.evidence, self._own())[1]
        return [(short.get(w, w) + (" (our setting)" if i in ours else ""), e)
                for i, (w, e) in enumerate(zip(words(self.evidence), self.evidence))]

    def item_notes(self) -> list[str]:
        """What each item's word rests on beyond its own line (:func:`fedcompanion.reproduction.rule.claim.notes`)."""
        return notes(self.evidence)

    def checked_controls(self) -> list[tuple[str, Evidence]]:
        """Each control with its outcome (:func:`fedcompanion.reproduction.rule.claim.control_outcomes`): ``rejected``,
        or e.g. ``inconclusive, not rejected``."""
        return control_outcomes(self.controls)

    def same_controls(self) -> list[tuple[str, Evidence]]:
        """Each A/A control with its outcome (:func:`fedcompanion.reproduction.rule.claim.same_outcomes`)."""
        return same_outcomes(self.evidence)

    def held(self) -> str:
        """``k of n items hold, j reversed, ...`` over the items that decide the word (the paper's own settings,
        where declared)."""
        said = words(self.evidence)
        deciding = split(self.evidence, self._own())[0]
        if not deciding:  # nothing could be run: say so rather than "0 of 0"
            return f"{len(self.evidence)} item{'s' if len(self.evidence) != 1 else ''} not testable here"
        return counts([said[i] for i in deciding])

    def reversed_items(self) -> int:
        """How many items, of every setting, are significantly reversed."""
        return words(self.evidence).count("does not reproduce")

    def fragility(self) -> str:
        """How sure: the fewest evaluation seeds whose removal would change the word
        (:func:`fedcompanion.reproduction.rule.claim.fragility`), in words; empty for a claim with no seeded item."""
        seeded = [e for e in self.evidence if e.kind in ("paired", "against") and not e.deterministic]
        if not seeded:
            return ""
        if "_fragile" not in self.__dict__:  # (a search over seed subsets: once per claim read)
            self._fragile = fragility(self.evidence, self.reconstruction, self.controls, self._own())
        found = self._fragile
        if found is None:
            return "no set of seeds changes the word when left out (up to 3, keeping at least 3)"
        k, seeds = found
        return (f"leaving out {'seed' if k == 1 else 'seeds'} {', '.join(map(str, seeds))} changes the word "
                f"(fragility {k})")


@dataclass
class Summary:
    notebook: str
    title: str
    profile: str
    claims: list[Claim]
    diverged: list[dict] = field(default_factory=list)
    runs: int = 0
    checks: dict = field(default_factory=dict)
    runs_read: list | None = None  # the hashes of the stored runs the notebook read (None: not recorded)


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
        where = self.path.relative_to(self.path.parents[2]) if len(self.path.parents) > 2 else self.path
        out = [f"{self.summary.title} ({self.summary.profile} profile; summary {where})"]  # not the builder's path
        for c in self.summary.claims:
            out += [f"{c.id}: {c.verdict} ({c.explain()})"] + [f"    {e.describe()}" for e in c.evidence]
        return "\n".join(out)

    def _repr_markdown_(self) -> str:
        out = [f"**Verdicts** ({self.summary.profile} profile; by the rule of `fedcompanion.reproduction.rule.claim`; "
               "each claim's entry in REPRODUCTION.md defines the words):", "",
               *table_head(["claim", "verdict", "items"])]
        report = "../" * (self.summary.notebook.count("/") + 1) + "REPRODUCTION.md"  # from notebooks/<name>.ipynb
        out += [f"| {escape_cell(c.claim)} (`{c.id}`, [report]({report}#{anchor(c.id)})) | **{c.verdict}** "
                f"| {c.held()} |" for c in self.summary.claims]
        for c in self.summary.claims:
            out += ["", f"`{c.id}`" + (f" ({c.fragility()})" if c.fragility() else "") + ":"]
            out += [f"* {w}: {escape_cell(e.describe())}" + (f" ({escape_cell(n)})" if n else "")
                    for (w, e), n in zip(c.items(), c.item_notes())]
            out += [f"* control, which the test must reject ({w}): {escape_cell(e.describe())}"
                    for w, e in c.checked_controls()]
            out += [f"* A/A control, which must not be significant ({w}): {escape_cell(e.describe())}"
                    for w, e in c.same_controls()]
        return "\n".join(out)


    def _repr_html_(self) -> str:
        """The same verdicts as an HTML table and lists (what JupyterLab and the site show: a page's Markdown
        renderer may lack tables); every text escaped."""
        e_ = html.escape
        report = "../" * (self.summary.notebook.count("/") + 1) + "REPRODUCTION.md"  # the site: its page
        rows = "".join(f"<tr><td>{e_(c.claim)} (<code>{e_(c.id)}</code>, <a href=\"{report}#{anchor(c.id)}\">report"
                       f"</a>)</td><td><strong>{e_(c.verdict)}</strong></td><td>{e_(c.held())}</td>"
                       f"<td>{e_(c.fragility())}</td></tr>" for c in self.summary.claims)
        out = [f"<p><strong>Verdicts</strong> ({e_(self.summary.profile)} profile; by the rule of "
               "<code>fedcompanion.reproduction.rule.claim</code>; the report defines the words)</p>",
               "<table class=\"verdicts\"><thead><tr><th>claim</th><th>verdict</th><th>items</th><th>how sure</th>"
               f"</tr></thead><tbody>{rows}</tbody></table>"]
        for c in self.summary.claims:
            items = [f"<li>{e_(w)}: {e_(e.describe())}" + (f" ({e_(n)})" if n else "") + "</li>"
                     for (w, e), n in zip(c.items(), c.item_notes())]
            items += [f"<li>control, which the test must reject ({e_(w)}): {e_(e.describe())}</li>"
                      for w, e in c.checked_controls()]
            items += [f"<li>A/A control, which must not be significant ({e_(w)}): {e_(e.describe())}</li>"
                      for w, e in c.same_controls()]
            out.append(f"<details><summary><code>{e_(c.id)}</code>: its items</summary><ul>{''.join(items)}</ul>"
                       "</details>")
        return "\n".join(out)


def anchor(claim_id: str) -> str:
    """The HTML anchor of a claim's entry in REPRODUCTION.md (``adafedadam.fair_baselines`` ->
    ``adafedadam-fair-baselines``: letters, digits and hyphens, which Sphinx keeps as they are)."""
    return claim_id.replace(".", "-").replace("_", "-")


def record(notebook: str, title: str, claims: list[Claim], results_dir: str | Path, profile: str,
           diverged: list[dict] | None = None, runs: int = 0, checks: dict | None = None) -> Recorded:
    """Write a notebook's summary (atomically) and return it as :class:`Recorded` (its path, and its verdicts as
    the notebook's last output). A summary equal to the stored one but for its numbers' last digits (another CPU's
    rounding: :mod:`fedcompanion.reproduction.rule.tolerance`) leaves the stored file as it is, and returns it.
    ``checks`` holds facts the tests read back from the committed results (e.g. where each tuned value lies in its
    grid). The summary also lists the stored runs the notebook read (their hashes), and this process forgets them."""
    if not notebook or notebook.startswith("_"):
        raise ValueError(f"record: notebook {notebook!r} must be a notebook's name; names starting with _ are the "
                         "reproduction's bookkeeping files (_timings, _history)")
    from ...experiments.cache import take_read_runs

    _check_unique_ids(claims, f"record({notebook!r})")
    summary = Summary(notebook, title, profile, claims, diverged or [], runs, checks or {}, take_read_runs())
    folder = summaries_dir(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (notebook.replace("/", "--") + ".json")
    text = json.dumps(_strict(asdict(summary)), indent=1, sort_keys=True, allow_nan=False)
    if path.exists() and stored_result_again(path, text):  # the same result: the file stays as it is
        return Recorded(path, read_summary(path))
    return Recorded(write_atomic(path, text + "\n"), summary)


def stored_result_again(path: Path, text: str) -> bool:
    """Whether summary ``text`` is the result stored in ``path`` but for its numbers' last digits
    (:mod:`fedcompanion.reproduction.rule.tolerance`)."""
    from ..rule.tolerance import moved

    try:
        return not moved(json.loads(path.read_text()), json.loads(text))
    except (ValueError, UnicodeDecodeError):
        return False


def load_summaries(results_dir: str | Path, superseded: bool = False) -> list[Summary]:
    """Every notebook's summary in ``results_dir`` (files starting with _ are bookkeeping, not summaries).

    A part's summary (the notebook's name, a dash, the part: ``92_arena-qsar``, ``adafedadam/03_adafedadam-b``,
    what `make reproduce` runs of a notebook with a target of its own) is left out where the whole notebook's summary
    is there too: the whole holds the part's runs and more, so each claim is shown once, with all its evidence.
    ``superseded=True`` keeps every summary (pruning keeps the runs of each)."""
    folder = summaries_dir(results_dir)
    every = [read_summary(path) for path in sorted(folder.glob("*.json")) if not path.name.startswith("_")]
    if superseded:
        return every
    names = {s.notebook for s in every}
    shown = [s for s in every if whole_of(s.notebook) == s.notebook or whole_of(s.notebook) not in names]
    _check_unique_ids([(s.notebook, c) for s in shown for c in s.claims], f"the summaries in {folder}")
    return shown


def _check_unique_ids(claims: list, where: str) -> None:
    """Refuse two claims with one id (``claims``: claims, or (notebook, claim) pairs): the report gives each id one
    anchor and one entry, so a second would hide the first."""
    seen: dict[str, str] = {}
    for item in claims:
        notebook, claim = item if isinstance(item, tuple) else ("", item)
        if claim.id in seen:
            first = seen[claim.id]
            both = f" (notebooks {first!r} and {notebook!r})" if notebook else ""
            raise DamagedFile(f"{where}: two claims have the id {claim.id!r}{both}; every claim needs an id of its "
                              "own (the report's anchor): rename one")
        seen[claim.id] = notebook


def whole_of(name: str) -> str:
    """The notebook a summary name belongs to: ``adafedadam/03_adafedadam-b`` -> ``adafedadam/03_adafedadam`` (a
    notebook's own name has no dash)."""
    folder, _, stem = name.rpartition("/")
    return f"{folder}/{stem.split('-')[0]}" if folder else stem.split("-")[0]


_CLAIM_FIELDS = {"id": (str,), "paper": (str,), "claim": (str,), "figures": (list,), "evidence": (list,),
                 "numbers": (str,), "settings": (str,), "deviations": (str,), "reconstruction": (bool,),
                 "controls": (list,)}
_TUNED_FIELDS = {"default": (dict,), "default_score": (float,), "value": (dict,), "score": (float,),
                 "at_edge": (list,), "grid": (dict,)}


def read_summary(path: Path) -> Summary:
    """One notebook's summary, every field the report reads checked (:class:`~fedcompanion.infra.atomic.DamagedFile`
    names the file and the field)."""
    data = _unstrict(read_json(path, "notebook summary"))
    for name, kinds in (("notebook", (str,)), ("title", (str,)), ("profile", (str,)), ("claims", (list,)),
                        ("diverged", (list,)), ("runs", (int,)), ("checks", (dict,)), ("runs_read", (list,))):
        _field(data, name, kinds, path, default=None if name in ("diverged", "runs", "checks", "runs_read") else ...)
    for h in data.get("runs_read") or ():
        if not isinstance(h, str) or not re.fullmatch(r"[0-9a-f]{16}", h):
            raise DamagedFile(f"{path}: runs_read should list runs' hashes (16 lowercase hex digits), got "
                              f"{repr(h)[:40]}")
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


_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _strict(value):
    """``value`` as strict JSON can hold it: a non-finite number (a missing run's NaN, a diverged run's infinity) as
    the string Python's ``float`` reads back (``"NaN"``, ``"Infinity"``, ``"-Infinity"``), not JSON's missing token."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def _unstrict(value):
    """The inverse of :func:`_strict` (a summary written before it holds the tokens themselves: read as they are)."""
    if isinstance(value, str):
        return _NONFINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _unstrict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unstrict(v) for v in value]
    return value


def table_head(columns: list[str]) -> list[str]:
    """The first two lines of a markdown table: its header of ``columns`` and the rule under it (every table the
    package writes starts here)."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def escape_cell(text: str) -> str:
    """``text`` as one cell of a markdown table: its bars escaped, on one line, and no markup of its own
    (:func:`plain`)."""
    return plain(text).replace("|", "\\|")


def plain(text: str) -> str:
    """A claim's text (a claim, its settings, its numbers) as Markdown that shows it as written: on one line, no raw
    HTML (``<`` and ``>`` as entities) and no link (``](`` broken), so a text from a summary can put neither a tag
    nor a ``javascript:`` link on a reader's page."""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("](", "]\\(") \
        .replace("\r", " ").replace("\n", " ")


