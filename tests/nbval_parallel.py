"""nbval over the executed notebooks, two pytest processes at a time on two cores (one per core, each notebook's
kernel with one thread), the notebooks dealt longest first; `make test` runs it after the notebooks' smoke runs.

    python tests/nbval_parallel.py build/executed [--parallel N]

Each notebook is re-run in a kernel of its own and its outputs marked ``# NBVAL_CHECK_OUTPUT`` must come out as the
smoke run printed them (determinism). The copies' parameters say ``refresh = False`` and name the smoke runs' results
folder, so the second execution reads the runs and computed records the first stored (about a fifth of its time);
that the runs themselves come out the same is `verify --subset methods`' check (tests/suite.py). Exits non-zero if
any process failed, after printing every process's output.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cost(path: Path) -> float:
    """A notebook's expected nbval time: the seconds its papermill run took (papermill records them in the executed
    copy), else its size in MB."""
    try:
        return float(json.loads(path.read_text())["metadata"]["papermill"]["duration"])
    except (KeyError, TypeError, ValueError):
        return path.stat().st_size / 1e6


def dealt(paths: list[Path], parallel: int) -> list[list[Path]]:
    """The notebooks in ``parallel`` groups of about equal cost (:func:`cost`), the costliest dealt first to the
    lightest group."""
    groups: list[list[Path]] = [[] for _ in range(parallel)]
    load = [0.0] * parallel
    costs = {path: cost(path) for path in paths}  # each executed notebook read once
    for path in sorted(paths, key=lambda p: -costs[p]):
        k = load.index(min(load))
        groups[k].append(path)
        load[k] += costs[path]
    return [g for g in groups if g]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--parallel", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    paths = sorted(args.folder.rglob("*.ipynb"))
    if not paths:
        print(f"no executed notebook under {args.folder}: run the notebook tests first", file=sys.stderr)
        return 2
    env = {**os.environ, **{name: "1" for name in THREADS}} if args.parallel > 1 else dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                               "--nbval-current-env", *map(str, group)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for group in dealt(paths, max(1, args.parallel))]
    codes = []
    for proc in procs:
        out, _ = proc.communicate()
        print(out, end="")
        codes.append(proc.returncode)
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
