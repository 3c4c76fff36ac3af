"""What `make html` costs a reader who clones the repository: every notebook executed from the committed results,
then the site, on a fresh clone of this checkout's HEAD; and whether that leaves the clone's ``git status`` clean.

    python benchmarks/fresh_clone.py [--keep DIR] [--record]

It clones HEAD into a temporary folder (or ``--keep DIR``), runs ``python -m fedcompanion.reproduction.site --paper``
there with this checkout's interpreter and the clone's own ``src/`` first on the path (the same command `make html`
runs), and prints each notebook's wall time (from the progress lines ``[k/n] NAME done in S s``), the whole command's
time, and the files it modified (``git status --porcelain``: there should be none). ``--record`` writes the times into
this checkout's ``results/summaries/_timings.json`` (``warm``), from which README's notebook table takes its second
time. The machine is named beside them; the notebooks run two at a time on 2 cores, as in `make reproduce`.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DONE = re.compile(r"^\[\d+/\d+\] (\S+?)\.ipynb(?: \((\S+)\))? done in (\d+) s")


def notebook_times(output: str) -> dict[str, float]:
    """Each notebook's (or part's) seconds from reproduce's progress lines."""
    times = {}
    for line in output.splitlines():
        found = DONE.match(line.strip())
        if found:
            times[found.group(2) or found.group(1)] = float(found.group(3))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="clone into this (new) folder and keep it")
    parser.add_argument("--record", action="store_true", help="write the times into results/summaries/_timings.json")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="fedcompanion-clone-")) / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(work)], check=True)
    env = {**os.environ, "PYTHONPATH": str(work / "src"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fedcompanion.reproduction.site", "--paper"], cwd=work, env=env,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    elapsed = time.perf_counter() - start
    print(done.stdout[-3000:])
    times = notebook_times(done.stdout)
    executed = re.search(r"total (\d+) s elapsed", done.stdout)
    notebooks_s = float(executed.group(1)) if executed else float("nan")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=work, text=True, capture_output=True).stdout
    print(f"clone: {work}\nmake html (site --paper) exit {done.returncode} in {elapsed:.0f} s: the notebooks "
          f"{notebooks_s:.0f} s, the site {elapsed - notebooks_s:.0f} s")
    for name, seconds in sorted(times.items(), key=lambda item: -item[1]):
        print(f"  {seconds:6.0f} s  {name}")
    print("git status after it:", "clean" if not status.strip() else "\n" + status)
    if args.record and done.returncode == 0:
        sys.path.insert(0, str(ROOT / "src"))
        from fedcompanion.reproduction.timings import write_warm

        write_warm(ROOT / "results", times, notebooks_s, elapsed - notebooks_s)
        print("recorded in results/summaries/_timings.json (warm)")
    return done.returncode or (1 if status.strip() else 0)


if __name__ == "__main__":
    sys.exit(main())
