"""How long Ray takes to start on this machine: ``ray.init`` and ``ray.shutdown`` in a fresh process, as a Flower
simulation (fedcompanion.flower.simulate) starts it, timed from outside, several times.

    python benchmarks/ray_startup.py [--runs 4] [--vs-pythonpath DIR]

``--vs-pythonpath DIR`` times, run by run in turn, the same start-up with DIR in front of ``PYTHONPATH`` (packages
installed there with ``pip install --no-deps --target DIR ...`` take the place of the environment's: how jsonschema
4.26 with rfc3987-syntax, which pyproject.toml keeps out, compares) and prints the ratio of the medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

START = ("import os, ray; ray.init(include_dashboard=False, num_cpus=os.cpu_count(), log_to_driver=False); "
         "ray.shutdown()")


def once(pythonpath: str | None) -> float:
    """Wall seconds of one fresh process that imports Ray, starts it and shuts it down."""
    env = dict(os.environ, RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    tic = time.perf_counter()
    subprocess.run([sys.executable, "-c", START], env=env, check=True, capture_output=True)
    return time.perf_counter() - tic


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--vs-pythonpath", default=None)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    kinds = [None, args.vs_pythonpath] if args.vs_pythonpath else [None]
    once(None)  # warm-up: the file cache
    times: dict = {kind: [] for kind in kinds}
    for run in range(args.runs):
        for kind in kinds:
            times[kind].append(once(kind))
            print(f"run {run + 1}: {'this environment' if kind is None else kind}: {times[kind][-1]:.1f} s", flush=True)
    here = statistics.median(times[None])
    low, high = min(times[None]), max(times[None])
    print(f"this environment: median {here:.1f} s of {args.runs} (min {low:.1f}, max {high:.1f})")
    if args.vs_pythonpath:
        there = statistics.median(times[args.vs_pythonpath])
        print(f"with {args.vs_pythonpath} first: median {there:.1f} s; ratio {here / there:.2f}")


if __name__ == "__main__":
    main()
