"""CEADMM/ICEADMM solver benchmark: ``fc.run`` with the ADMM family's default arguments against the authors'
MATLAB code run under GNU Octave, on the same problems, side by side, in one run.

    python benchmarks/ceadmm.py                                  # fedcompanion only
    python benchmarks/ceadmm.py --authors-code PATH/ICEADMM/Solvers   # and the authors' solvers, if Octave is here

PATH is a local copy of https://github.com/ShenglongZhou/ICEADMM (not shipped with this project). Problems: the
paper's non-IID linear regression (200 clients, n = 100, k0 = 10) and QSAR logistic regression in the authors' setting
(64 clients, mu = 1e-3, k0 = 5, ``curvature='gram'`` for ICEADMM, which is what their code does; CEADMM's
least-squares solve also as the authors' code does it, one Newton step by CG from zero (``local_solver='cg'``), and
solved to 1e-8 by CG started from the client's iterate (``'cg_warm'``)). Time per iteration is measured as (t(N2) -
t(N1)) / (N2 - N1) for both sides, so set-up cancels; set-up is reported apart. fedcompanion's times are medians of
``--repeats`` interleaved runs, the authors' one run each (a minute each under Octave). The objective trajectories
f(y^k) of both sides are compared as a faithfulness check. Writes ``benchmarks/results/ceadmm.csv``.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import fedcompanion as fc
from fedcompanion.infra.machine import default_threads
from fedcompanion.tasks.convex import ClientBlocks

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = {
    "linear regression": dict(build=lambda: fc.tasks.least_squares_task(num_clients=200, dim=100, seed=0), k0=10,
                              runs=[("iceadmm", {}), ("ceadmm", {}), ("ceadmm", {"local_solver": "cg"}),
                                    ("ceadmm", {"local_solver": "cg_warm"})], lengths=(100, 1100),
                              cg_lengths=(100, 200)),  # the CG solvers are 10-25x slower an iteration
    "QSAR logistic": dict(build=lambda: fc.tasks.qsar_logistic_task(num_clients=64, mu=1e-3, setting="authors"),
                          k0=5, runs=[("iceadmm", {"curvature": "gram"}), ("ceadmm", {})], lengths=(20, 120)),
}


def ours(task, method, k0, hp, iterations, record_every=1, threads=None):
    algo = fc.make(method, k0=k0, **hp)
    tic = time.perf_counter()
    # the family's own records at every iteration, as the notebooks record them (no pass over the training data)
    result = fc.run(task, algo, iterations, eval_every=record_every, threads=threads, eval_train=False,
                    per_client_metrics=False)
    return time.perf_counter() - tic, result.metric("objective_y").to_numpy()


OCTAVE = """
addpath('{solvers}');
load('{data}');
pars.maxit = {maxit}; pars.tol = 0; pars.r0 = 0.1; {extra}
t = tic; out = {call}; elapsed = toc(t);
fid = fopen('{out}', 'w'); fprintf(fid, '%.6f\\n', elapsed); fprintf(fid, '%.17g\\n', out.objy); fclose(fid);
"""


def authors(task, problem, method, k0, iterations, solvers: Path, work: Path):
    """(seconds, f(y^k) for k = 1..iterations) of the authors' solver under Octave."""
    import scipy.io

    data = work / "data.mat"
    if not data.exists():
        scipy.io.savemat(data, {"A": task.x_all.double().numpy(), "b": task.y_all.double().numpy()[:, None],
                                "di": task.client_sizes.double().numpy()[None, :]})
    if problem == "linear regression":
        call = f"ICEADMM4LinearReg(di, size(A,2), A, b, {k0}, {int(method == 'iceadmm')}, pars)"
        extra = ""
    else:
        if method != "iceadmm":
            return None  # the authors publish no exact (CEADMM) solver for logistic regression
        call = f"ICEADMM4LogistReg(di, size(A,2), A, b, {k0}, pars)"
        extra = "pars.mu = 1e-3;"
    out = work / "out.txt"
    script = work / "run.m"
    script.write_text(OCTAVE.format(solvers=solvers, data=data, maxit=iterations - 1, extra=extra, call=call, out=out))
    subprocess.run(["octave", "--no-gui", "--quiet", str(script)], check=True, capture_output=True, timeout=3600)
    values = np.loadtxt(out)
    return float(values[0]), values[1:]


def lengths(spec, hp) -> tuple[int, int]:
    """(N1, N2): the two run lengths whose times are differenced, for both sides (shorter for the CG solvers)."""
    return spec["cg_lengths" if "local_solver" in hp else "lengths"]


def measure(task, method, spec, hp, threads, repeats, setup):
    """fedcompanion's time per iteration (medians of interleaved runs) and its f(y^k) trajectory."""
    n1, n2 = lengths(spec, hp)
    times = {"t1": [], "t2": [], "quiet": []}
    for _ in range(repeats):  # interleaved, medians: one timing of a ~1 s run is noisy
        times["t1"].append(ours(task, method, spec["k0"], hp, n1, threads=threads)[0])
        t, f_ours = ours(task, method, spec["k0"], hp, n2, threads=threads)
        times["t2"].append(t)
        times["quiet"].append(ours(task, method, spec["k0"], hp, n2, record_every=n2, threads=threads)[0])
    t1, t2, quiet = (statistics.median(times[k]) for k in ("t1", "t2", "quiet"))
    used = threads or default_threads(task.num_params) or torch.get_num_threads()
    return dict(problem=spec["name"], method=method, hyperparameters=str(hp), k0=spec["k0"], setup_s=setup,
                threads=used, default_threads=threads is None, ours_ms_per_iteration=1e3 * (t2 - t1) / (n2 - n1),
                recording_overhead=(t2 - quiet) / quiet), f_ours


def compare_authors(row, task, problem, method, spec, hp, f_ours, solvers, work) -> str:
    """Time the authors' solver on the same problem (the same two lengths) and compare trajectories; fills ``row``."""
    n1, n2 = lengths(spec, hp)
    got = authors(task, problem, method, spec["k0"], n1, solvers, work)
    if got is None:
        return "; the authors publish no solver for this case"
    a1, _ = got
    a2, f_authors = authors(task, problem, method, spec["k0"], n2, solvers, work)
    a_per_it, per_it = (a2 - a1) / (n2 - n1), row["ours_ms_per_iteration"] / 1e3
    k = min(len(f_ours), len(f_authors))
    gap = float(np.max(np.abs(f_ours[:k] - f_authors[:k]) / np.abs(f_authors[:k])))
    row.update(authors_ms_per_iteration=1e3 * a_per_it, speedup=a_per_it / per_it,
               max_relative_objective_difference=gap)
    return f"; authors' code {1e3 * a_per_it:7.2f} ms/iteration: {a_per_it / per_it:5.1f}x; f(y^k) agree to {gap:.1e}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--authors-code", type=Path, help="folder holding ICEADMM4LinearReg.m and ICEADMM4LogistReg.m")
    parser.add_argument("--repeats", type=int, default=5, help="timings of fedcompanion's runs (medians)")
    parser.add_argument("--threads", type=int, nargs="*", default=[2],
                        help="also time fedcompanion on these torch thread counts, beside its default")
    args = parser.parse_args()
    use_octave = args.authors_code is not None
    if use_octave and not shutil.which("octave"):
        print("GNU Octave is not installed here: measuring fedcompanion only")
        use_octave = False
    if use_octave and not (args.authors_code / "ICEADMM4LinearReg.m").exists():
        raise SystemExit(f"{args.authors_code} does not hold ICEADMM4LinearReg.m")
    rows = []
    for problem, spec in PROBLEMS.items():
        task = spec["build"]()
        tic = time.perf_counter()
        blocks = ClientBlocks.from_task(task)
        blocks.lipschitz()
        setup = time.perf_counter() - tic
        print(f"\n{problem}: {task.num_clients} clients, n = {task.num_params}; set-up (blocks and Lipschitz "
              f"constants) {setup:.2f} s")
        spec = dict(spec, name=problem)
        with tempfile.TemporaryDirectory() as tmp:
            for method, hp in spec["runs"]:
                for threads in [None, *args.threads]:  # None: fc.run's default (one thread on a small problem)
                    row, f_ours = measure(task, method, spec, hp, threads, args.repeats, setup)
                    shown = "default" if threads is None else f"{threads} threads"
                    line = (f"  {method:8s} {hp!s:30s} fedcompanion ({shown}, {row['threads']} used) "
                            f"{row['ours_ms_per_iteration']:7.2f} ms/iteration (recording every iteration costs "
                            f"{100 * row['recording_overhead']:+.0f}%)")
                    if use_octave and threads is None and hp.get("local_solver", "cg") == "cg":  # not cg_warm
                        line += compare_authors(row, task, problem, method, spec, hp, f_ours, args.authors_code,
                                                Path(tmp))
                    print(line, flush=True)
                    rows.append(row)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "ceadmm.csv", index=False)
    print(f"\nwrote {out / 'ceadmm.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
