"""Execute the notebooks with papermill: ``python -m fedcompanion.reproduce [--profile smoke] [--only text]``.

Each notebook under ``notebooks/`` (``00_tour.ipynb`` first, then the paper folders in order) is executed into
the git-ignored ``build/`` folder; its runs land in ``results/`` (cached, so an interrupted reproduction resumes:
every run's files are written atomically) and its figures in ``figures/``. The wall time of each notebook is
recorded beside the notebooks' summaries, and the run ends by writing ``REPRODUCTION.md`` (and README's claims
table) from those summaries. The smoke profile writes everything under ``build/`` instead.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def notebooks(folder: Path = ROOT / "notebooks") -> list[Path]:
    """Every notebook, in reading order (sorted paths: ``00_tour`` first, then by paper and number)."""
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def execute(notebook: Path, output: Path, parameters: dict, progress: bool = True) -> None:
    """Run ``notebook`` with papermill into ``output`` (cwd: the repository root)."""
    import papermill

    output.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(
        str(notebook), str(output), parameters=parameters, cwd=str(ROOT),
        progress_bar=progress, kernel_name="python3",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from .report import write_report, write_timings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=["paper", "smoke"], default="paper")
    parser.add_argument("--only", default="", help="run only notebooks whose path contains this")
    parser.add_argument("--refresh", action="store_true", help="ignore cached results")
    args = parser.parse_args(argv)
    todo = [nb for nb in notebooks() if args.only in str(nb)]
    if not todo:
        print(f"error: --only {args.only!r} matches no notebook under notebooks/", file=sys.stderr)
        return 2
    out_dir = ROOT / "build" / ("reproduce" if args.profile == "paper" else "reproduce-smoke")
    results, figures = ROOT / "results", ROOT / "figures"
    params = {"profile": args.profile, "refresh": args.refresh}
    if args.profile == "smoke":  # a smoke run must not overwrite the paper-scale results and figures
        params.update(results_dir="build/smoke-results", figures_dir="build/smoke-figures")
        results, figures = ROOT / "build" / "smoke-results", ROOT / "build" / "smoke-figures"
    start = time.time()
    for k, nb in enumerate(todo, 1):
        rel = nb.relative_to(ROOT / "notebooks")
        print(f"[{k}/{len(todo)}] {rel}  (profile={args.profile})", flush=True)
        tic = time.time()
        execute(nb, out_dir / rel, params)
        seconds = time.time() - tic
        write_timings(results, {str(rel.with_suffix("")): seconds})
        print(f"      done in {seconds:.0f} s", flush=True)
    written = sorted(p for p in figures.glob("*") if p.stat().st_mtime >= start)
    print(f"\nwrote {len(written)} figure files to {figures}:")
    for p in written:
        print(f"  {p.relative_to(ROOT)}")
    if args.profile == "paper":
        report = write_report(results, ROOT / "REPRODUCTION.md", ROOT / "README.md")
    else:
        report = write_report(results, ROOT / "build" / "REPRODUCTION-smoke.md", readme=None)
    print(f"total {time.time() - start:.0f} s; executed notebooks in {out_dir.relative_to(ROOT)}; report {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
