"""Re-run a named subset of the committed figure runs from scratch and compare with the committed results:
``python -m fedcompanion.reproduction.verify [--subset smoke|figures|methods] [--results results]`` (``make verify``).

``--subset methods --results build/test-results`` is `make test`'s determinism check of the runs: one run of every
method (task, dataset, algorithm, engine, sampling) that the notebooks' smoke runs computed, its shortest, computed
again on the same machine, which must be bit-identical.

Every selected run is recomputed in a temporary folder with the code as it is now, through ``sweep`` as the
notebooks run it (one torch thread per run: with the default thread count runs differ in the last bits), and
its history compared with the committed one. Only results made by the current code are chosen (a different code
fingerprint means *stale*: run ``make reproduce`` and commit the new results). The command exits non-zero when a
run differs or when the subset's runs are missing for this code.

``--compare OTHER`` instead matches every run in ``--results`` with the run of the same config in another results
folder (made by any code, on any machine: e.g. the committed results, after ``make reproduce`` on your machine) and
counts how many histories are bit-identical and how far the others are (a report: it exits 0).

What "the same" means depends on where the committed run was computed (each result records its machine's
:func:`~fedcompanion.infra.machine.numerical_platform`):

* **on this platform** (same CPU instruction sets, torch and BLAS): the history must be *bit-identical*, as every
  run is on one machine (fixed seeds, fixed torch threads per run, deterministic kernels);
* **on another platform**, the kernels sum in another order and the last bits differ. Float64 runs must agree to
  1e-9 of each metric's scale (its largest magnitude in the committed run, so that a quantity converging to zero is
  not compared at its last, tiny value). Float32 training amplifies those bits from round to round (``--compare``
  between the two machines of README's determinism section: the untrained models agree to 2.3e-6, the trained
  histories differ by a median of 2.8e-3), so for float32 runs only the untrained model's evaluation (the first
  recorded round) must agree, to 1e-4; the difference after training is printed. The float64 engine run of the
  smoke subset is what checks training across platforms.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ..experiments import CacheMiss, ExperimentConfig, load_result, read_history, sweep
from ..infra.atomic import DamagedFile, read_json
from ..infra.machine import numerical_platform
from ..infra.processes import terminate_as_exit
from ..validation import ConfigError

ROOT = Path(__file__).resolve().parents[3]
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}  # across platforms; on the same platform: bit-identical
def _dtype(task: str) -> str:
    """The dtype a task builder computes in: the default of its ``dtype`` parameter (a config cannot set one: it is
    no JSON value); float32 for a builder without one, or a name no longer registered."""
    import inspect

    import torch

    from ..tasks import TASKS

    try:
        default = inspect.signature(TASKS[task]).parameters["dtype"].default
    except (KeyError, TypeError, ValueError):
        return "float32"
    return "float64" if default is torch.float64 else "float32"


def _stored(results: Path, damaged: list | None = None) -> list[dict]:
    """Every run record in ``results``; a record that cannot be read is left out, and named in ``damaged``."""
    out = []
    for path in sorted(results.glob("*.json")):
        try:
            meta = read_json(path, "run record")
        except DamagedFile as error:
            if damaged is not None:
                damaged.append(str(error))
            continue
        if isinstance(meta, dict) and isinstance(meta.get("config"), dict):
            out.append({**meta, "_file": path.name})
        elif damaged is not None:
            damaged.append(f"{path}: a run record without a config mapping")
    return out


SUBSETS = {
    # one float64 solver run, one float64 engine run, one float32 engine run (a few seconds each), and one run of
    # AdaFedAdam's setting A at the paper's 200 rounds (`make setting-a`; a minute or two)
    "smoke": [
        lambda c, m: c["algorithm"] == "iceadmm" and c["task"] == "least_squares"
        and m.get("label", "").startswith("linear regression|")  # ceadmm/01's (not the m and n sweeps')
        and c["hyperparameters"].get("k0") == 5 and "sigma" not in c["hyperparameters"],
        lambda c, m: c["algorithm"] == "naccadam" and c["hyperparameters"].get("accumulate") == 4 and c["seed"] == 0,
        lambda c, m: m.get("label") == "FedVRA" and c["algorithm"] == "fedvra" and c["rounds"] <= 20
        and c["lr"] == 0.1 and c["hyperparameters"].get("gamma") == 0.01
        and c["hyperparameters"].get("dual_stepsize") == 1.0 and c["seed"] == 100,
        lambda c, m: c["algorithm"] == "adafedadam" and c["rounds"] == 200 and c["clients_per_round"] is None
        and c["task_args"].get("num_clients") == 5 and m.get("label") == "AdaFedAdam" and c["seed"] == 0,
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


def _method_subset(stored: list[dict]) -> list[dict]:
    """One run per method (task, dataset, algorithm, engine, client sampling), the one that took the least time, so
    that every method's arithmetic is computed twice."""
    def method(meta: dict) -> tuple:
        c = meta["config"]
        return (c["task"], str(c["task_args"].get("dataset")), c["algorithm"], str(c.get("engine")),
                json.dumps(c.get("sampling"), sort_keys=True))

    fastest: dict[tuple, dict] = {}
    for meta in sorted(stored, key=lambda m: (m.get("wall_time") or 0.0, m["_file"])):
        fastest.setdefault(method(meta), meta)
    return [fastest[key] for key in sorted(fastest)]


def is_current(meta: dict) -> bool:
    """Whether a stored run was made by the code as it is now (its fingerprint is this code's for its config)."""
    try:
        return meta["config"] == json.loads(json.dumps(_config(meta).key(), default=list))
    except Exception:  # noqa: BLE001  (a config this code cannot build: an algorithm since removed, a bad field)
        return False


def select(subset: str, stored: list[dict]) -> list[dict]:
    """The stored runs of ``subset`` that the current code made (``smoke``: the first run matching each of its rules;
    ``figures``: the figures' runs; ``methods``: the shortest run of every method)."""
    current = [m for m in stored if is_current(m)]
    if subset == "figures":
        return _figure_subset(current)
    if subset == "methods":
        return _method_subset(current)
    chosen = []
    for rule in SUBSETS[subset]:
        hits = [m for m in current if rule(m["config"], m)]
        if hits:
            chosen.append(hits[0])
    return chosen


def _config(meta: dict) -> ExperimentConfig:
    fields = dict(meta["config"])
    for derived in ("code", "files", "data"):  # what the key adds to the config's own fields
        fields.pop(derived, None)
    return ExperimentConfig(**fields, label=meta.get("label", ""))


def compare(old: pd.DataFrame, new: pd.DataFrame) -> float:
    """Largest difference between two histories, relative to each metric's scale (its largest magnitude in
    ``old``); inf if their rows differ or a value is NaN in one and not in the other."""
    if len(old) != len(new) or not (old[["round", "client", "metric"]].values == new[["round", "client", "metric"]]
                                     .values).all():
        return float("inf")
    a, b = old.value.to_numpy(float), new.value.to_numpy(float)
    if (np.isnan(a) != np.isnan(b)).any():
        return float("inf")
    scale = old.value.abs().groupby(old.metric).transform("max").to_numpy(float)
    diff = np.abs(a - b) / np.maximum(scale, 1e-300)
    return float(np.max(np.where(np.isnan(a), 0.0, diff), initial=0.0))


def _untrained(history: pd.DataFrame) -> pd.DataFrame:
    """The rows of the first recorded round (the model before any training)."""
    return history[history["round"] == history["round"].min()].reset_index(drop=True)


def judge(committed: pd.DataFrame, fresh: pd.DataFrame, dtype: str, same_platform: bool) -> tuple[bool, str]:
    """(whether the recomputed history ``fresh`` vouches for ``committed``, the verdict in words)."""
    difference = compare(committed, fresh)
    if difference == 0:
        return True, "bit-identical"
    if same_platform:
        return False, f"DIFFERENT on the platform that computed it (largest relative difference {difference:.1e})"
    if dtype == "float64":
        if difference <= TOLERANCE[dtype]:
            return True, f"within tolerance on another platform ({difference:.1e} <= {TOLERANCE[dtype]:g}, float64)"
        return False, f"DIFFERENT (largest relative difference {difference:.1e}, float64, another platform)"
    untrained = compare(_untrained(committed), _untrained(fresh))
    after = f"after training up to {difference:.1e}"
    if untrained <= TOLERANCE[dtype]:
        return True, (f"untrained model within tolerance on another platform ({untrained:.1e} <= "
                      f"{TOLERANCE[dtype]:g}, float32; {after})")
    return False, f"DIFFERENT (the untrained model's evaluation by {untrained:.1e}, float32, another platform)"


def platform_difference(recorded: dict | None) -> str:
    """Which fields of the recorded platform differ from this machine's ("" if none)."""
    here = numerical_platform()
    if recorded is None:
        return "not recorded"
    return "; ".join(f"{key}: {recorded.get(key)!r} there, {value!r} here" for key, value in here.items()
                     if recorded.get(key) != value)


def _without_code(config: dict) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in ("code", "files")}, sort_keys=True)


def _histories(folder: Path) -> dict[str, tuple[dict, pd.DataFrame]]:
    """Every run in ``folder`` whose history is what its JSON vouches for, by its config without the code
    fingerprint."""
    out: dict = {}
    versions: dict = {}
    for meta in _stored(folder):
        try:
            history = read_history(folder / f"{Path(meta['_file']).stem}.csv.gz", meta.get("history") or {})
        except CacheMiss:
            continue
        versions.setdefault(_without_code(meta["config"]), []).append((meta, history))
    ambiguous = []
    for key, runs in versions.items():  # several code versions of one config: this code's run is compared
        current = [run for run in runs if len(runs) == 1 or is_current(run[0])]
        if len(current) == 1:
            out[key] = current[0]
        else:
            ambiguous.append([meta for meta, _ in runs])
    if ambiguous:
        files = "; ".join(", ".join(m["_file"] for m in metas) for metas in ambiguous[:3])
        raise ConfigError(f"{folder} holds {len(ambiguous)} config(s) run by several code versions, none of them "
                          f"(or more than one) this code's: {files}; remove the stale runs (or compare folders made "
                          "by one code version each)")
    return out


def compare_folders(ours: Path, theirs: Path) -> pd.DataFrame:
    """One row per run in ``ours``: its label, algorithm, dtype, and against the same config's run in ``theirs``
    ``outcome`` (``bit-identical``, ``different`` or ``only here``) with the largest difference relative to each
    metric's scale over the whole history (``difference``; inf: the histories have different rows, e.g. a run
    diverged in one and not the other, or in another round) and over the first recorded round (``untrained``)."""
    other = _histories(theirs)
    rows = []
    for key, (meta, history) in _histories(ours).items():
        config = meta["config"]
        row = dict(label=meta.get("label", ""), algorithm=config["algorithm"], dtype=_dtype(config["task"]))
        if key not in other:
            rows.append({**row, "outcome": "only here", "difference": float("nan"), "untrained": float("nan")})
            continue
        difference = compare(other[key][1], history)
        rows.append({**row, "outcome": "bit-identical" if difference == 0 else "different", "difference": difference,
                     "untrained": compare(_untrained(other[key][1]), _untrained(history))})
    return pd.DataFrame(rows, columns=["label", "algorithm", "dtype", "outcome", "difference", "untrained"])


def _print_comparison(table: pd.DataFrame, ours: Path, theirs: Path) -> None:
    counts = table.groupby(["dtype", "outcome"]).size().unstack(fill_value=0)
    print(f"{len(table)} runs in {ours}, matched by config with {theirs}:")
    print(counts.to_string())
    differing = table[table.outcome == "different"]
    if len(differing):
        finite = differing[np.isfinite(differing.difference)]
        print(f"different histories: {len(differing) - len(finite)} with other rows (diverged on one machine only, "
              "or in another round)"
              + ("" if finite.empty else "; the others by a median relative difference of "
                 + ", ".join(f"{g.difference.median():.1e} ({dtype}, largest {g.difference.max():.1e})"
                             for dtype, g in finite.groupby("dtype"))))
        print("first recorded round (the untrained model), largest relative difference: " + ", ".join(
            f"{g.untrained.max():.1e} ({dtype})" for dtype, g in differing.groupby("dtype")))


def main(argv: list[str] | None = None) -> int:
    """``python -m fedcompanion.reproduction.verify``: recompute and compare, or compare two results folders; the exit
    status says whether every run was vouched for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", choices=[*SUBSETS, "figures", "methods"], default="smoke")
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--compare", metavar="OTHER", help="another results folder: count the runs of --results "
                        "whose history is bit-identical to the same config's run there")
    args = parser.parse_args(argv)
    results = Path(args.results)
    if args.compare:
        try:
            table = compare_folders(results, Path(args.compare))
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        _print_comparison(table, results, Path(args.compare))
        return 0
    damaged: list[str] = []
    stored = _stored(results, damaged)
    for line in damaged:
        print(f"  DAMAGED, left out: {line}")
    chosen = select(args.subset, stored)
    stale = [m for m in stored if not is_current(m)]
    wanted = len(SUBSETS.get(args.subset, [])) if args.subset in SUBSETS else 1
    print(f"{len(stored)} runs in {results}, {len(stale)} made by other code (each run's fingerprint covers the code "
          "it executes)")
    if len(chosen) < wanted:
        print(f"error: {results} holds only {len(chosen)} of the {wanted} runs of subset {args.subset!r} for this "
              "code: run `make reproduce` (and commit results/)", file=sys.stderr)
        return 1
    failures, reported = 0, set()
    with terminate_as_exit(), tempfile.TemporaryDirectory() as tmp:
        for meta in chosen:
            config = _config(meta)
            name = f"{config.label or config.algorithm:40s} {config.algorithm:10s} seed {config.seed}"
            try:
                committed, committed_meta = load_result(config, results)
            except ConfigError as error:  # damaged: say so, check the others
                failures += 1
                print(f"  {name}: DAMAGED ({error})")
                continue
            sweep([config], tmp, jobs=1, progress=False)  # the notebooks' path, with its fixed thread count
            fresh, fresh_meta = load_result(config, tmp)
            elsewhere = platform_difference(meta.get("platform"))
            if elsewhere and elsewhere not in reported:
                reported.add(elsewhere)
                print(f"  committed on another platform ({elsewhere})")
            ok, verdict = judge(committed, fresh, _dtype(config.task), same_platform=not elsewhere)
            if committed_meta["status"] != fresh_meta["status"]:
                ok, verdict = False, f"status {committed_meta['status']!r} committed, {fresh_meta['status']!r} now"
            failures += not ok
            print(f"  {name}: {verdict}")
    print(f"{len(chosen) - failures} of {len(chosen)} runs vouched for")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
