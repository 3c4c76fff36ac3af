"""`make test`: the whole suite in two lanes that run side by side, so that both cores stay busy.

    python tests/suite.py [--log-dir build/test-lanes]

* **notebooks**: every notebook under papermill with the smoke profile (``pytest -m notebook``: the notebooks one per
  core, as `make reproduce` runs them, from an empty cache in ``build/test-results``), the site built from those
  executed copies (``tests/test_site.py``), nbval over them (``tests/nbval_parallel.py``: each copy executed again,
  reading the runs and computed records the first execution stored, and its marked outputs must come out identical:
  the notebooks' analysis is deterministic), one run of every method the smoke runs computed recomputed from scratch,
  bit for bit (``verify --subset methods``: the runs are deterministic), then a smoke-sized subset of the committed
  figure runs recomputed and compared (``verify --subset smoke``, one thread).
* **units**: every other test (``pytest -m "not notebook"``, the site's left to the first lane), with one thread per
  process: the notebooks' lane keeps both cores busy for most of its time, and an oversubscribed MKL runs some
  solvers several times slower.

The notebooks' lane uses both cores in bursts and waits on kernels in between; the unit tests use one core. Run one
after the other, they took 1,409 s on a 2-core Xeon; verify sits in the lane that would otherwise end first
(docs/benchmarks.md). Each lane's output goes to its log and is printed whole when the lane ends; the exit status is
non-zero if any step of either lane failed (a lane stops at its first failing step).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=40"]
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
LANES = {
    "notebooks": ({}, [
        [*PYTEST, "-m", "notebook"],
        ({"FEDCOMPANION_SITE_REQUIRED": "1"}, [*PYTEST, "tests/test_site.py"]),
        [sys.executable, "tests/nbval_parallel.py", "build/executed"],
        (ONE_THREAD, [sys.executable, "-m", "fedcompanion.reproduction.verify", "--subset", "methods", "--results",
                      "build/test-results"]),
        (ONE_THREAD, [sys.executable, "-m", "fedcompanion.reproduction.verify", "--subset", "smoke"]),
    ]),
    "units": (ONE_THREAD, [
        [*PYTEST, "-m", "not notebook", "--ignore=tests/test_site.py"],
    ]),
}


def command(step) -> tuple[dict, list[str]]:
    """A step's own environment variables (beyond its lane's) and its command: a step is a command, or the pair."""
    return step if isinstance(step, tuple) else ({}, step)


def run_lane(name: str, env: dict, steps: list, log: Path, codes: dict) -> None:
    """Run ``steps`` one after the other into ``log`` until one fails; record the lane's status in ``codes``."""
    start = time.perf_counter()
    with log.open("w") as out:
        for step in steps:
            own, step = command(step)
            out.write(f"$ {' '.join(step[1:] if step[0] == sys.executable else step)}\n")
            out.flush()
            code = subprocess.call(step, cwd=ROOT, env={**os.environ, **env, **own}, stdout=out,
                                   stderr=subprocess.STDOUT)
            if code != 0:
                codes[name] = code
                break
        else:
            codes[name] = 0
        out.write(f"lane {name}: {'passed' if codes[name] == 0 else 'FAILED'} in {time.perf_counter() - start:.0f} s\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", type=Path, default=ROOT / "build" / "test-lanes")
    args = parser.parse_args(argv)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    codes: dict[str, int] = {}
    threads = {name: threading.Thread(target=run_lane, args=(name, env, steps, args.log_dir / f"{name}.log", codes))
               for name, (env, steps) in LANES.items()}
    start = time.perf_counter()
    for thread in threads.values():
        thread.start()
    print(f"make test: {len(LANES)} lanes side by side ({', '.join(LANES)}); logs in {args.log_dir}", flush=True)
    pending = dict(threads)
    while pending:
        for name, thread in list(pending.items()):
            thread.join(timeout=5)
            if not thread.is_alive():
                del pending[name]
                print(f"\n===== lane {name} =====", flush=True)
                print((args.log_dir / f"{name}.log").read_text(), end="", flush=True)
    failed = [name for name, code in codes.items() if code != 0]
    print(f"\nmake test: {'FAILED: ' + ', '.join(failed) if failed else 'passed'} in "
          f"{time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
