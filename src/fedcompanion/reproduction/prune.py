"""``python -m fedcompanion.reproduction.prune``: the stored runs that no notebook reads, and with ``--delete`` their
removal.

A run (or a cached computation, ``results/computed/``) stays in ``results/`` after the grid or the setting that
asked for it changed: tuning grids extended and then narrowed, a horizon lengthened. Each notebook's summary lists
the runs it read (``runs_read``, written by :func:`fedcompanion.reproduction.claims.record.record`), so a stored run
whose hash no summary lists is an orphan: nothing the project shows depends on it. Pruning refuses to guess. It
stops, deleting nothing, where it cannot know what is read:

* a folder with no summary (a ``fedcompanion run`` folder, a copy without ``summaries/``): every run would look
  like an orphan;
* a summary written before the lists existed, or damaged (named, with the notebook to run again);
* an interrupted ``rekey`` (its journal is there: run ``rekey --finish`` first).

And it keeps what it cannot know to be an orphan yet: a run younger than ``--min-age`` hours (default 6): a notebook
that is running has stored runs that its summary, written at its end, will list. Only a run's own files are touched
(a record named by a run's 16-hex-digit hash and its history and model); a user's ``notes.json`` is not a run.
Each run's record goes first, so a run interrupted mid-deletion is never served half; the history or model it may
leave is debris that the next pruning removes.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from ..experiments.computed import FOLDER
from .claims.record import load_summaries

ROOT = Path(__file__).resolve().parents[3]
SUFFIXES = (".json", ".csv.gz", ".pt")  # one stored run's files (cache.store), the record first
RUN_NAME = re.compile(r"[0-9a-f]{16}")  # a run's files are named by its key's hash (experiments.config.key_hash)
MIN_AGE_HOURS = 6.0
ELSEWHERE = {"91_your_own_problem": "build/your-own-results"}  # notebooks that store their runs in another folder
JOURNAL = ".rekey-journal.json"  # written by rekey while it moves runs (fedcompanion.reproduction.rekey)


def _stem(path: Path) -> str | None:
    """The run hash a file of the results folder belongs to, if it is a run's file (a regular file, named so)."""
    for suffix in SUFFIXES:
        if path.name.endswith(suffix) and RUN_NAME.fullmatch(path.name[:-len(suffix)]) and path.is_file():
            return path.name[:-len(suffix)]
    return None


def stored_runs(results: Path) -> dict[str, list[Path]]:
    """Each run hash in ``results`` -> its files there (record, history, model; a record may be gone), and each
    cached computation's (``computed/<hash>.json``, :mod:`fedcompanion.experiments.computed`) -> its record."""
    runs: dict[str, list[Path]] = {}
    computed = results / FOLDER
    for path in [*sorted(results.iterdir()), *(sorted(computed.iterdir()) if computed.is_dir() else [])]:
        stem = _stem(path)
        if stem is not None and (path.parent == results or path.name.endswith(".json")):
            runs.setdefault(stem, []).append(path)
    return runs


def read_hashes(results: Path) -> set[str]:
    """The hashes of the runs the notebooks' summaries list as read; ``ValueError`` where that cannot be known (no
    summary, a summary that does not record them, a damaged summary, an interrupted rekey)."""
    return set().union(*read_by_notebook(results).values())


def read_by_notebook(results: Path) -> dict[str, set[str]]:
    """Each notebook summary's name -> the hashes of the runs it lists as read (:func:`read_hashes`, by notebook)."""
    if not results.is_dir():
        raise ValueError(f"{results} is not a folder: give the results folder (--results)")
    if (results / JOURNAL).exists():
        raise ValueError(f"a rekey was interrupted ({results / JOURNAL} is there): finish it first "
                         f"(python -m fedcompanion.reproduction.rekey --finish --results {results})")
    summaries = load_summaries(results, superseded=True)
    if not summaries:
        raise ValueError(f"{results} has no notebook summary ({results / 'summaries'}): nothing says which runs are "
                         "read, so every run would look like an orphan; pruning is for a folder that notebooks write")
    unrecorded = sorted(s.notebook for s in summaries if s.runs_read is None)
    if unrecorded:
        raise ValueError(f"the summaries of {unrecorded} do not list the runs they read: execute those notebooks "
                         "again (python -m fedcompanion.reproduction.reproduce --only NAME) before pruning")
    by_notebook: dict[str, set[str]] = {}
    for summary in summaries:
        by_notebook.setdefault(summary.notebook, set()).update(summary.runs_read)
    return by_notebook


def orphans(results: Path, min_age_hours: float = MIN_AGE_HOURS, read: set[str] | None = None) -> list[str]:
    """The hashes of the stored runs that no notebook's summary lists as read (``read``, default
    :func:`read_hashes`, which raises ``ValueError`` where they cannot be known) and that are older than
    ``min_age_hours`` (their newest file), sorted. A run's debris (a history or model whose record is gone) counts as
    a run."""
    read = read_hashes(results) if read is None else read
    cutoff = time.time() - min_age_hours * 3600
    return sorted(h for h, files in stored_runs(results).items()
                  if h not in read and max(p.stat().st_mtime for p in files) <= cutoff)


def delete(results: Path, hashes: list[str]) -> int:
    """Remove each run's files, its record first; the number of files removed."""
    removed, stored = 0, stored_runs(results)
    for h in hashes:
        for path in sorted(stored.get(h, []), key=lambda p: SUFFIXES.index(next(s for s in SUFFIXES
                                                                              if p.name.endswith(s)))):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def main(argv: list[str] | None = None) -> int:
    """``python -m fedcompanion.reproduction.prune [--results DIR] [--min-age HOURS] [--delete]``: print how many
    stored runs no notebook reads (and their size), and with ``--delete`` remove them; exit status 2 (nothing
    deleted) where that cannot be known."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--min-age", type=float, default=MIN_AGE_HOURS, metavar="HOURS",
                        help=f"keep runs younger than this (default {MIN_AGE_HOURS:g}: a running notebook's runs are "
                        "listed only when it ends); 0 once no notebook runs")
    parser.add_argument("--delete", action="store_true", help="remove the orphans' files (default: list them)")
    args = parser.parse_args(argv)
    if not args.min_age >= 0:
        parser.error(f"--min-age must be >= 0 hours, got {args.min_age}")
    try:
        by_notebook = read_by_notebook(args.results)
        read = set().union(*by_notebook.values())
        found = orphans(args.results, args.min_age, read)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    runs = stored_runs(args.results)
    young = sum(1 for h in runs if h not in read and h not in found)
    stored = set(runs)
    missing = {name: len(hashes - stored) for name, hashes in sorted(by_notebook.items()) if not hashes <= stored}
    size = sum(p.stat().st_size for h in found for p in runs[h])
    print(f"{len(found)} of {len(runs)} stored runs are read by no notebook ({size / 1e6:.1f} MB)")
    if young:
        print(f"{young} more no summary lists are younger than {args.min_age:g} h and kept (a notebook may be running)")
    if missing:
        listed = "; ".join(f"{name}: {n}" + (f", stored in {ELSEWHERE[name]}" if name in ELSEWHERE else "")
                           for name, n in missing.items())
        print(f"warning: the summaries list {len(read - stored)} runs that are not stored in {args.results} "
              f"({listed}); runs a notebook keeps in another results folder are never pruned from here",
              file=sys.stderr)
    if args.delete:
        print(f"removed {delete(args.results, found)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
