"""``python -m fedcompanion.prune``: the stored runs that no notebook reads, and with ``--delete`` their removal.

A run stays in ``results/`` after the grid or the setting that asked for it changed: tuning grids extended and then
narrowed, a horizon lengthened. Each notebook's summary lists the runs it read (``runs_read``, written by
:func:`fedcompanion.claims.record`), so a stored run whose hash no summary lists is an orphan: nothing the project
shows depends on it. Pruning refuses to guess: a summary written before the lists existed stops it, naming the
notebook to run again.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .claims import load_summaries

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".json", ".csv.gz", ".pt")  # one stored run's files (cache.store)


def orphans(results: Path) -> list[str]:
    """The hashes of the runs stored in ``results`` that no notebook's summary lists as read, sorted.

    Raises ``ValueError`` naming the notebooks whose summary does not record what they read."""
    summaries = load_summaries(results, superseded=True)
    unrecorded = sorted(s.notebook for s in summaries if s.runs_read is None)
    if unrecorded:
        raise ValueError(f"the summaries of {unrecorded} do not list the runs they read: execute those notebooks "
                         "again (python -m fedcompanion.reproduce --only NAME) before pruning")
    read = {h for s in summaries for h in s.runs_read}
    return sorted(p.name[:-len(".json")] for p in results.glob("*.json") if p.name[:-len(".json")] not in read)


def delete(results: Path, hashes: list[str]) -> int:
    """Remove each run's files (record, history, model); the number of files removed."""
    removed = 0
    for h in hashes:
        for suffix in SUFFIXES:
            path = results / f"{h}{suffix}"
            if path.exists():
                path.unlink()
                removed += 1
    return removed


def main(argv: list[str] | None = None) -> int:
    """``python -m fedcompanion.prune [--results DIR] [--delete]``: print how many stored runs no notebook reads (and
    their size), and with ``--delete`` remove them; exit status 2 if a summary does not list what it read."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--delete", action="store_true", help="remove the orphans' files (default: list them)")
    args = parser.parse_args(argv)
    try:
        found = orphans(args.results)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    stored = len(list(args.results.glob("*.json")))
    size = sum((args.results / f"{h}{s}").stat().st_size for h in found for s in SUFFIXES
               if (args.results / f"{h}{s}").exists())
    print(f"{len(found)} of {stored} stored runs are read by no notebook ({size / 1e6:.1f} MB)")
    if args.delete:
        print(f"removed {delete(args.results, found)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
