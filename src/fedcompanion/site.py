"""``python -m fedcompanion.site`` (``make html``): the static site, offline, into ``build/html``.

The source is assembled in ``build/site-src`` from ``docs/`` (the API reference and the paper notes), the generated
``REPRODUCTION.md`` with ``figures/``, and the executed notebooks (``build/reproduce`` from ``make reproduce``, or
else ``build/executed`` from ``make test``), then rendered by Sphinx with myst-nb without executing anything. Warnings
are errors.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def executed_notebooks() -> Path | None:
    for folder in (ROOT / "build" / "reproduce", ROOT / "build" / "executed"):
        if folder.exists() and any(folder.rglob("*.ipynb")):
            return folder
    return None


def assemble(source: Path, notebooks: Path | None = None, figures: Path = ROOT / "figures",
             report: Path = ROOT / "REPRODUCTION.md") -> Path:
    """Copy everything the site renders into ``source``."""
    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(ROOT / "docs", source)
    shutil.copy(report, source / "REPRODUCTION.md")
    shutil.copytree(figures, source / "figures")
    notebooks = notebooks or executed_notebooks()
    if notebooks is None:
        raise FileNotFoundError("no executed notebooks: run `make test` or `make reproduce` first")
    shutil.copytree(notebooks, source / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return source


def build(output: Path = ROOT / "build" / "html", notebooks: Path | None = None, figures: Path = ROOT / "figures",
          report: Path = ROOT / "REPRODUCTION.md") -> Path:
    from sphinx.cmd.build import build_main

    source = assemble(ROOT / "build" / "site-src", notebooks, figures, report)
    status = build_main(["-W", "--keep-going", "-q", "-b", "html", str(source), str(output)])
    if status != 0:
        raise RuntimeError(f"sphinx-build failed with status {status} (warnings are errors)")
    return output / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "html")
    args = parser.parse_args(argv)
    print(f"wrote {build(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
