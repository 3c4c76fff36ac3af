"""Re-run a named subset of the committed figure runs from scratch and compare with the committed results:
``python -m fedcompanion.verify [--subset smoke|figures] [--results results]`` (``make verify``).

Every selected run is recomputed in a temporary folder with the code as it is now, through ``sweep`` as the
notebooks run it (one torch thread per run: with the default thread count runs differ in the last bits), and
its history compared with the committed one: *bit-identical*, *within tolerance* (float64 runs: 1e-9 relative;
float32 runs: 1e-4 relative, since the last bits of a float32 product depend on the CPU's instruction set), or
*different*. Only results made by the current code are chosen (a different code fingerprint means *stale*: run
``make reproduce`` and commit the new results). The command exits non-zero when a run differs or when the subset's
runs are missing for this code.

Why the tolerance: on one machine every run is bit-reproducible (fixed seeds, fixed torch threads per run,
deterministic kernels). Across machines, float64 runs agree to about 1e-12 and float32 runs to about 1e-6 per round,
which long or unstable runs can amplify; the figure-level conclusions do not depend on those bits.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from .experiments import ExperimentConfig, code_fingerprint, load_result, sweep

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}
FLOAT64_TASKS = ("least_squares", "qsar")  # the builders whose default dtype is float64


def _stored(results: Path) -> list[dict]:
    out = []
    for path in sorted(results.glob("*.json")):
        try:
            meta = json.loads(path.read_text())
            out.append(meta)
        except ValueError:
            continue
    return out


SUBSETS = {
    # a few seconds each: one float64 solver run, one float64 engine run, one float32 engine run
    "smoke": [
        lambda c, m: c["algorithm"] == "iceadmm" and c["task"] == "least_squares"
        and c["hyperparameters"].get("k0") == 5 and "sigma" not in c["hyperparameters"],
        lambda c, m: c["algorithm"] == "naccadam" and c["hyperparameters"].get("accumulate") == 4 and c["seed"] == 0,
        lambda c, m: m.get("label") == "FedVRA" and c["algorithm"] == "fedvra" and c["rounds"] <= 30
        and c["lr"] == 0.05 and c["hyperparameters"].get("gamma") == 0.1
        and c["hyperparameters"].get("dual_stepsize") == 1.0,
    ],
}


def _figure_subset(stored: list[dict]) -> list[dict]:
    """One run per label (the first seed), so that every figure has a recomputed run behind it."""
    seen, out = set(), []
    for meta in sorted(stored, key=lambda m: (m.get("label", ""), m["config"]["seed"])):
        key = meta.get("label", "")
        if key not in seen:
            seen.add(key)
            out.append(meta)
    return out


def select(subset: str, stored: list[dict]) -> list[dict]:
    current = [m for m in stored if m["config"].get("code") == code_fingerprint()]
    if subset == "figures":
        return _figure_subset(current)
    chosen = []
    for rule in SUBSETS[subset]:
        hits = [m for m in current if rule(m["config"], m)]
        if hits:
            chosen.append(hits[0])
    return chosen


def _config(meta: dict) -> ExperimentConfig:
    fields = dict(meta["config"])
    fields.pop("code", None)
    return ExperimentConfig(**fields, label=meta.get("label", ""))


def compare(old: pd.DataFrame, new: pd.DataFrame) -> float:
    """Largest relative difference between two histories (inf if their rows differ)."""
    if len(old) != len(new) or not (old[["round", "client", "metric"]].values == new[["round", "client", "metric"]]
                                     .values).all():
        return float("inf")
    a, b = old.value.to_numpy(float), new.value.to_numpy(float)
    both_nan = np.isnan(a) & np.isnan(b)
    scale = np.maximum(np.abs(a), 1e-12)
    diff = np.where(both_nan, 0.0, np.abs(a - b) / scale)
    return float(np.nanmax(diff, initial=0.0)) if not np.isnan(diff).any() else float("inf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", choices=[*SUBSETS, "figures"], default="smoke")
    parser.add_argument("--results", default=str(ROOT / "results"))
    args = parser.parse_args(argv)
    results = Path(args.results)
    stored = _stored(results)
    chosen = select(args.subset, stored)
    stale = [m for m in stored if m["config"].get("code") != code_fingerprint()]
    wanted = len(SUBSETS.get(args.subset, [])) if args.subset != "figures" else 1
    print(f"code fingerprint {code_fingerprint()}; {len(stored)} committed runs, {len(stale)} made by other code")
    if len(chosen) < wanted:
        print(f"error: the committed results hold only {len(chosen)} of the {wanted} runs of subset "
              f"{args.subset!r} for this code: run `make reproduce` and commit results/", file=sys.stderr)
        return 1
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for meta in chosen:
            config = _config(meta)
            committed, _ = load_result(config, results)
            sweep([config], tmp, jobs=1, progress=False)  # the notebooks' path, with its fixed thread count
            fresh, _ = load_result(config, tmp)
            dtype = "float64" if config.task in FLOAT64_TASKS else "float32"
            difference = compare(committed, fresh)
            if difference == 0:
                verdict = "bit-identical"
            elif difference <= TOLERANCE[dtype]:
                verdict = f"within tolerance ({difference:.1e} <= {TOLERANCE[dtype]:g}, {dtype})"
            else:
                verdict = f"DIFFERENT (largest relative difference {difference:.1e}, {dtype})"
                failures += 1
            print(f"  {config.label or config.algorithm:40s} {config.algorithm:10s} seed {config.seed}: {verdict}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
