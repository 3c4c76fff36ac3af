"""CEADMM/ICEADMM solver benchmark: ``fc.run`` with the ADMM family's default arguments against the authors'
MATLAB code run under GNU Octave, on the same problems, side by side, in one run.

    python benchmarks/ceadmm.py                                  # fedcompanion only
    python benchmarks/ceadmm.py --authors-code PATH/ICEADMM/Solvers   # and the authors' solvers, if Octave is here

PATH is a local copy of https://github.com/ShenglongZhou/ICEADMM (not shipped with this project). Problems:
the paper's non-IID linear regression (200 clients, n = 100, k0 = 10) and QSAR logistic regression in the
authors' setting (64 clients, mu = 1e-3, k0 = 5, ``curvature='gram'`` for ICEADMM, which is what their code
does). Time per iteration is measured as (t(N2) - t(N1)) / (N2 - N1) for both sides, so set-up cancels; set-up
is reported apart. fedcompanion's times are medians of ``--repeats`` interleaved runs, the authors' one run each
(a minute each under Octave). The objective trajectories f(y^k) of both sides are compared as a faithfulness check.
Writes ``benchmarks/results/ceadmm.csv``.
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
from fedcompanion.algorithms.admm_blocks import ClientBlocks

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = {
    "linear regression": dict(build=lambda: fc.tasks.least_squares_task(num_clients=200, dim=100, seed=0), k0=10,
                              runs={"iceadmm": {}, "ceadmm": {}}, lengths=(100, 1100)),
    "QSAR logistic": dict(build=lambda: fc.tasks.qsar_logistic_task(num_clients=64, mu=1e-3, setting="authors"),
                          k0=5, runs={"iceadmm": {"curvature": "gram"}, "ceadmm": {}}, lengths=(20, 120)),
}


def ours(task, method, k0, hp, iterations, record_every=1):
    algo = fc.make(method, k0=k0, **hp)
    tic = time.perf_counter()
    result = fc.run(task, algo, iterations, eval_every=record_every)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--authors-code", type=Path, help="folder holding ICEADMM4LinearReg.m and ICEADMM4LogistReg.m")
    parser.add_argument("--repeats", type=int, default=5, help="timings of fedcompanion's runs (medians)")
    args = parser.parse_args()
    torch.set_num_threads(2)
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
        n1, n2 = spec["lengths"]
        with tempfile.TemporaryDirectory() as tmp:
            for method, hp in spec["runs"].items():
                times = {"t1": [], "t2": [], "quiet": []}
                for _ in range(args.repeats):  # interleaved, medians: one timing of a ~1 s run is noisy
                    times["t1"].append(ours(task, method, spec["k0"], hp, n1)[0])
                    t, f_ours = ours(task, method, spec["k0"], hp, n2)
                    times["t2"].append(t)
                    times["quiet"].append(ours(task, method, spec["k0"], hp, n2, record_every=n2)[0])
                t1, t2, quiet = (statistics.median(times[k]) for k in ("t1", "t2", "quiet"))
                per_it = (t2 - t1) / (n2 - n1)
                overhead = (t2 - quiet) / quiet
                row = dict(problem=problem, method=method, hyperparameters=str(hp), k0=spec["k0"], setup_s=setup,
                           ours_ms_per_iteration=1e3 * per_it, recording_overhead=overhead)
                line = (f"  {method:8s} {hp!s:24s} fedcompanion {1e3 * per_it:7.2f} ms/iteration "
                        f"(recording every iteration costs {100 * overhead:+.0f}%)")
                if use_octave:
                    got = authors(task, problem, method, spec["k0"], n1, args.authors_code, Path(tmp))
                    if got is not None:
                        a1, _ = got
                        a2, f_authors = authors(task, problem, method, spec["k0"], n2, args.authors_code, Path(tmp))
                        a_per_it = (a2 - a1) / (n2 - n1)
                        k = min(len(f_ours), len(f_authors))
                        gap = float(np.max(np.abs(f_ours[:k] - f_authors[:k]) / np.abs(f_authors[:k])))
                        row.update(authors_ms_per_iteration=1e3 * a_per_it, speedup=a_per_it / per_it,
                                   max_relative_objective_difference=gap)
                        line += (f"; authors' code {1e3 * a_per_it:7.2f} ms/iteration: {a_per_it / per_it:5.1f}x; "
                                 f"f(y^k) agree to {gap:.1e}")
                    else:
                        line += "; the authors publish no solver for this case"
                print(line, flush=True)
                rows.append(row)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "ceadmm.csv", index=False)
    print(f"\nwrote {out / 'ceadmm.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
