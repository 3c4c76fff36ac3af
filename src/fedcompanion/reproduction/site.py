"""``python -m fedcompanion.reproduction.site`` (``make html``): the static site, offline, into ``build/html``.

The source is assembled in ``build/site-src`` from ``docs/`` (the API reference, the paper notes, the design,
benchmark and determinism pages), the generated ``REPRODUCTION.md`` with ``figures/``, and the executed notebooks
(each one's ``build/reproduce`` copy from ``make reproduce``, else its ``build/executed`` copy from ``make test``;
``make html`` passes ``--paper``, which first executes, from the committed cache, every notebook still without a
paper copy), then rendered by Sphinx with myst-nb without executing anything. Warnings are errors.

What the assembly adds to the sources:

* the front page (``docs/index.md`` with its ``<!-- front -->`` marker): the verdicts (the forest plot and the
  claims table, both from the notebooks' summaries) and a gallery of every figure, each linked to the notebook that
  draws it; the notebooks in reading order (:func:`fedcompanion.reproduction.reproduce.reading_order`);
* in the report: each claim's HTML anchor as a MyST target (:func:`myst_targets`);
* in each notebook's copy: papermill's injected-parameters cell removed, the parameters cell and the cells that
  call ``record(...)`` collapsed (their code one click away), the ``# NBVAL_CHECK_OUTPUT`` markers dropped, the
  verdicts' links to REPRODUCTION.md pointed at its page, and, on a page built from the smoke profile, a banner that
  says so.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FRONT = "<!-- front -->"
NBVAL_MARK = "# NBVAL_CHECK_OUTPUT"
VERDICTS_ABOVE = ("**What reproduces**, as this notebook's last cell computes it from the runs below (the words are "
                  "defined in the reproduction report's verdict rule):")
SMOKE_BANNER = (":::{warning}\nThis page was built from the **smoke profile** (`make test`): tiny settings whose "
                "numbers mean nothing. `make reproduce`, then `make html`, builds it from the paper-scale run.\n:::")


def executed_notebooks(build: Path = ROOT / "build") -> Path | None:
    """The executed notebooks the site is built from, gathered in ``build/site-notebooks``: each notebook's
    paper-profile copy (``build/reproduce``: `make reproduce`, `make arena`, `make extended`) where it has one, else
    its smoke copy (``build/executed``: `make test`), whose page says so; None where there is neither."""
    gathered = build / "site-notebooks"
    shutil.rmtree(gathered, ignore_errors=True)
    for folder in (build / "executed", build / "reproduce"):  # the paper copies last: they win
        for nb in sorted(folder.rglob("*.ipynb")) if folder.exists() else []:
            if ".ipynb_checkpoints" not in nb.parts and not failed(nb):  # a failed copy is never published
                (gathered / nb.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(nb, gathered / nb.relative_to(folder))
    return gathered if gathered.exists() else None


def _profile(cells: list[dict]) -> str | None:
    """The profile a notebook ran with: papermill's injected value, else the parameters cell's default."""
    for tag in ("injected-parameters", "parameters"):
        for cell in cells:
            if tag in cell.get("metadata", {}).get("tags", []):
                found = re.search(r"""^profile\s*=\s*["'](\w+)["']""", "".join(cell["source"]), re.M)
                if found:
                    return found.group(1)
    return None


def _tag(cell: dict, tag: str) -> None:
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def for_readers(notebook: dict) -> dict:
    """A notebook as the site shows it (see the module docstring); the executed file itself is not changed."""
    cells = notebook["cells"]
    smoke = _profile(cells) == "smoke"
    for cell in cells:
        tags = cell.get("metadata", {}).get("tags", [])
        source = "".join(cell["source"])
        if cell["cell_type"] != "code":
            continue
        if "injected-parameters" in tags:
            _tag(cell, "remove-cell")
        elif "parameters" in tags or re.search(r"^record\(", source, re.M):
            _tag(cell, "hide-input")
        if source.startswith(NBVAL_MARK):
            cell["source"] = source[len(NBVAL_MARK):].lstrip("\n")
        for output in cell.get("outputs", []):  # the verdicts' links to the report: its page on the site
            data = output.get("data", {})
            for kind in ("text/markdown", "text/html"):
                if kind in data:
                    data[kind] = "".join(data[kind]).replace("REPRODUCTION.md#", "REPRODUCTION.html#")
    title = next((i for i, c in enumerate(cells) if c["cell_type"] == "markdown"), -1)
    recording = [c for c in cells if c["cell_type"] == "code" and re.search(r"^record\(", "".join(c["source"]), re.M)]
    verdicts = [dict(o) for c in recording for o in c.get("outputs", [])
                if 'class="verdicts"' in "".join(o.get("data", {}).get("text/html", ""))]
    if verdicts:  # the answer where the reader starts: the last cell's verdicts, shown again under the title
        cells[title + 1:title + 1] = [
            {"cell_type": "markdown", "id": "verdicts-at-the-top", "metadata": {}, "source": VERDICTS_ABOVE},
            {"cell_type": "code", "id": "verdicts-at-the-top-table", "metadata": {"tags": ["remove-input"]},
             "execution_count": None, "source": "# the verdicts the last cell computes (a page skips an empty cell)",
             "outputs": verdicts}]
    if smoke:
        cells.insert(title + 1, {"cell_type": "markdown", "id": "smoke-profile-banner", "metadata": {},
                                 "source": SMOKE_BANNER})
    return notebook


def _notebook(path: Path) -> dict:
    """An executed notebook's JSON, checked as far as the site reads it (its cells' types and sources)."""
    from ..infra.atomic import DamagedFile, field, read_json

    nb = read_json(path, "executed notebook")
    for i, cell in enumerate(field(nb, "cells", (list,), path)):
        field(cell, "cell_type", (str,), path, where=f"cells[{i}]")
        source = field(cell, "source", (list, str), path, where=f"cells[{i}]")
        if isinstance(source, list) and not all(isinstance(line, str) for line in source):
            raise DamagedFile(f"{path}: cells[{i}].source should be text lines")
    return nb


def figure_pages(notebooks: Path, figures: Path) -> dict[str, str]:
    """Each figure's name -> the page (a notebook path without suffix) whose code saves it: the code names it in
    quotes, or names its base for a part's figure (``arena_ranking-qsar``: ``"arena_ranking" + PART``)."""
    pages: dict[str, str] = {}
    names = [p.stem for p in sorted(figures.glob("*.png"))]
    for nb in sorted(notebooks.rglob("*.ipynb")):
        code = "".join("".join(c["source"]) for c in _notebook(nb)["cells"]
                       if c["cell_type"] == "code")
        for name in names:
            if re.search(rf"""["']{re.escape(name.split("-")[0])}["']""", code):
                pages.setdefault(name, "notebooks/" + nb.relative_to(notebooks).with_suffix("").as_posix())
    return pages


def front_page(template: str, notebooks: list[str], figures: Path, pages: dict[str, str], results: Path) -> str:
    """``docs/index.md`` with the verdicts, the gallery and the reading-order toctrees in place of its marker."""
    from .arena import figure_name
    from .report import PAPERS, NoSummaries, claims_table, load_summaries, shown_arena
    from .verdict_figures import CHART, paper_figure

    summaries = load_summaries(results)
    if not summaries:
        raise NoSummaries(f"no notebook summaries in {results}: run `make reproduce` first")
    parts = ["## The verdicts", "",
             "Every claim of the three papers, one row each: its items, each a square coloured by its word (green "
             "holds, vermillion reversed, blue equivalent within the margin of practical relevance, grey "
             "inconclusive), a black diamond where its control (its test applied to a method that trains but the "
             "claim excludes) was rejected, as it must be, and the claim's verdict. Each word comes from the rule "
             "in `fedcompanion.reproduction.rule.item` and `fedcompanion.reproduction.rule.claim`; the [reproduction "
             "report](REPRODUCTION.md) has every effect with its interval, in the metric's units.", "",
             *[f"![{paper}: every claim's items and verdict](figures/{paper_figure(CHART, paper)}.png)"
               for paper in PAPERS], "", claims_table(summaries), ""]
    arena = shown_arena(summaries)
    ranking = figure_name("ranking", arena.notebook) if arena else ""
    if arena and (figures / f"{ranking}.png").exists():  # beside the claims: every method on the same tasks
        page = "[the notebook](notebooks/92_arena.ipynb)" if "92_arena" in notebooks else "`notebooks/92_arena.ipynb`"
        parts += ["## The arena", "", "Every engine algorithm on the same tasks under one tuning budget (not a claim "
                  f"of any paper; {page}): the mean with its 95% interval, filled where a method cannot be told apart "
                  "from the best.", "",
                  *[f"* {o['sentence']}" for o in arena.checks["arena"].values()], "",
                  f"![The arena](figures/{ranking}.png)", ""]
    parts += ["## Every figure", "", '<div class="fc-gallery">']
    for png in sorted(figures.glob("*.png")):
        target = f"{pages[png.stem]}.html" if png.stem in pages else f"_static/gallery/{png.name}"
        parts.append(f'<a href="{target}" title="{png.stem}"><img src="_static/gallery/{png.name}" '
                     f'alt="{png.stem}" loading="lazy"><span>{png.stem}</span></a>')
    parts += ["</div>", ""]
    from .reproduce import READING_ORDER

    sections: dict[str, list[str]] = {}
    for name in notebooks:
        part = next((t for prefix, t in READING_ORDER.items() if name.startswith(prefix)), "More notebooks")
        sections.setdefault(part, []).append(f"notebooks/{name}")
    for part, entries in sections.items():
        parts += ["```{toctree}", ":maxdepth: 1", f":caption: {part}", "", *entries, "```", ""]
    return template.replace(FRONT, "\n".join(parts))


def assemble(source: Path, notebooks: Path | None = None, figures: Path = ROOT / "figures",
             report: Path = ROOT / "REPRODUCTION.md", results: Path = ROOT / "results") -> Path:
    """Copy (and adapt, see the module docstring) everything the site renders into ``source``."""
    from .reproduce import reading_order

    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(ROOT / "docs", source)
    (source / "REPRODUCTION.md").write_text(myst_targets(report.read_text()))
    shutil.copytree(figures, source / "figures")
    gallery = source / "_static" / "gallery"
    gallery.mkdir(parents=True)
    for png in figures.glob("*.png"):
        shutil.copy(png, gallery / png.name)
    notebooks = notebooks or executed_notebooks()
    if notebooks is None:
        raise FileNotFoundError("no executed notebooks: run `make test` or `make reproduce` first")
    ordered = reading_order(sorted(p for p in notebooks.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts),
                            notebooks)
    for nb in ordered:
        target = source / "notebooks" / nb.relative_to(notebooks)
        target.parent.mkdir(parents=True, exist_ok=True)
        adapted = for_readers(_notebook(nb))
        target.write_text(json.dumps(adapted, indent=1, ensure_ascii=False), encoding="utf-8")
    names = [nb.relative_to(notebooks).with_suffix("").as_posix() for nb in ordered]
    index = source / "index.md"
    index.write_text(front_page(index.read_text(), names, figures, figure_pages(notebooks, figures), results))
    return source


def build(output: Path = ROOT / "build" / "html", notebooks: Path | None = None, figures: Path = ROOT / "figures",
          report: Path = ROOT / "REPRODUCTION.md", results: Path = ROOT / "results") -> Path:
    """Build the site into ``output`` (warnings are errors) and return the path of its index page."""
    from sphinx.cmd.build import build_main

    source = assemble(ROOT / "build" / "site-src", notebooks, figures, report, results)
    shutil.rmtree(output / "_modules", ignore_errors=True)  # viewcode keeps a page newer than its source: stale anchors
    status = build_main(["-E", "-W", "--keep-going", "-q", "-b", "html", str(source), str(output)])
    if status != 0:
        raise RuntimeError(f"sphinx-build failed with status {status} (warnings are errors)")
    return output / "index.html"


_ANCHOR = re.compile(r'^<a id="([^"]+)"></a>$', re.M)


def myst_targets(markdown: str) -> str:
    """The report's HTML anchors (``<a id="x"></a>``, which GitHub renders) as MyST targets (``(x)=``), which Sphinx
    resolves: the claim index's links work on both."""
    return _ANCHOR.sub(r"(\1)=", markdown)


def failed(path: Path) -> bool:
    """Whether an executed notebook stopped on an error (papermill still writes it: its error cell, an error output,
    a cell marked ``papermill.exception``): such a copy is never published."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return True
    return any("papermill-error-cell-tag" in c.get("metadata", {}).get("tags", [])
               or c.get("metadata", {}).get("papermill", {}).get("exception") is True
               or any(o.get("output_type") == "error" for o in c.get("outputs", [])) for c in cells)


def without_copy(folder: Path) -> list[str]:
    """The notebooks (their names under ``notebooks/``) with no executed copy in ``folder``, or a copy that failed
    (:func:`failed`)."""
    from .reproduce import notebooks

    names = [p.relative_to(ROOT / "notebooks") for p in notebooks()]
    return [n.with_suffix("").as_posix() for n in names if not (folder / n).exists() or failed(folder / n)]


def without_paper_copy(build: Path = ROOT / "build") -> list[str]:
    """The notebooks with no paper-profile copy in ``build/reproduce``, or a copy that failed (:func:`without_copy`)."""
    return without_copy(build / "reproduce")


def main(argv: list[str] | None = None) -> int:
    """``python -m fedcompanion.reproduction.site`` (``make html``): with ``--paper``, first execute at the paper
    profile every notebook that has no paper copy yet (from the committed cache: minutes, not the hours of computing its
    runs), so that every page is the paper run, the one the gallery shows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "html")
    parser.add_argument("--paper", action="store_true", help="execute the notebooks without a paper-profile copy "
                        "first (python -m fedcompanion.reproduction.reproduce --only ...), reading their runs from the "
                        "cache")
    parser.add_argument("--screenshots", action="store_true", help="only take the screenshots of the built site "
                        "(front page, a notebook page, the report) into docs/screenshots/, with headless Chromium")
    args = parser.parse_args(argv)
    if args.screenshots:
        for path in screenshots(args.output):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    missing = without_paper_copy() if args.paper else []
    if missing:
        from .reproduce import main as reproduce

        print(f"executing {len(missing)} notebook(s) at the paper profile first: {', '.join(missing)}", flush=True)
        if reproduce(["--profile", "paper", *(arg for name in missing for arg in ("--only", name))]) != 0:
            print(f"error: a notebook failed; no site written: {', '.join(without_paper_copy())}", file=sys.stderr)
            return 1
    print(f"wrote {build(args.output)}")
    return 0


SCREENSHOTS = {"front_page": "index.html", "notebook_page": "notebooks/fedvra/01_admm_is_variance_reduction.html",
               "report_page": "REPRODUCTION.html"}


def screenshots(site: Path, out: Path = ROOT / "docs" / "screenshots", size: tuple[int, int] = (1280, 1800)) -> list:
    """The first screen and a half of each page in :data:`SCREENSHOTS` of the built ``site``, as a reader sees it:
    headless Chromium, from files (no network), ``size`` pixels. Needs ``chromium`` on the PATH."""
    import subprocess

    browser = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if browser is None:
        raise SystemExit("screenshots need headless Chromium (chromium, chromium-browser or google-chrome on the PATH)")
    missing = [page for page in SCREENSHOTS.values() if not (site / page).exists()]
    if missing:
        raise SystemExit(f"{site} has no {missing}: run `make html` first")
    offline = ["unshare", "-n"]  # no network at all where this process may make a namespace (root, mostly)
    if os.geteuid() != 0 or not shutil.which("unshare") or subprocess.run([*offline, "true"]).returncode != 0:
        offline = []  # the site loads nothing from another host anyway (tests/test_site.py)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, page in SCREENSHOTS.items():
        path = out / f"{name}.png"
        subprocess.run([*offline, browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", "--disable-background-networking", f"--window-size={size[0]},{size[1]}",
                        f"--screenshot={path}", (site / page).resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
        written.append(path)
    return written


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------- checks of the built site (tests/test_site.py)
_REF = re.compile(r"""<(a|link|script|img|iframe|source)\b[^>]*?\b(href|src)=["']([^"']+)["']""", re.I)
_ID = re.compile(r"""\bid=["']([^"']+)["']""")


def external_resources(folder: Path) -> list[str]:
    """Every script, stylesheet, image or frame a built page loads from another host ("page: address")."""
    found = []
    for page in sorted(folder.rglob("*.html")):
        for tag, _, target in _REF.findall(page.read_text(encoding="utf-8", errors="replace")):
            if tag.lower() != "a" and re.match(r"(https?:)?//", target):
                found.append(f"{page.relative_to(folder)}: {target}")
    return found


def broken_links(folder: Path) -> list[str]:
    """Every link inside the site to a file that is not there, or to an anchor its page lacks ("page: link")."""
    from urllib.parse import unquote, urlsplit

    ids: dict[Path, set[str]] = {}

    def anchors(page: Path) -> set[str]:
        if page not in ids:
            ids[page] = set(_ID.findall(page.read_text(encoding="utf-8", errors="replace")))
        return ids[page]

    broken = []
    for page in sorted(p for p in folder.rglob("*.html") if "_static" not in p.relative_to(folder).parts):
        for _, _, target in _REF.findall(page.read_text(encoding="utf-8", errors="replace")):
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or target.startswith(("mailto:", "javascript:")):
                continue
            path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not path.exists():
                broken.append(f"{page.relative_to(folder)}: {target}")
            elif parts.fragment and path.suffix == ".html" and unquote(parts.fragment) not in anchors(path):
                broken.append(f"{page.relative_to(folder)}: {target}")
    return broken
