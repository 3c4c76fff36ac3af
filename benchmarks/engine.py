"""Engine benchmark: rounds per second of the loop and batched engines (``make bench``).

MNIST MLP 784-200-200-10, 100 clients (Dirichlet 0.3), m in {10, 50, 100} clients per round, one
local epoch of mini-batches of 32, FedAvg and FedVRA. Each measurement runs in its own process
(so its peak resident memory is its own) and reports rounds/s (evaluation excluded), achieved
GFLOP/s (6 x multiply-adds per sample x samples processed) against a float32 matrix-multiply peak
measured here, and peak memory. Writes ``figures/bench_engine.csv`` and ``.png``/``.pdf``.
Flower's simulation engine joins the table once the Flower adapter exists.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MS = (10, 50, 100)
ALGORITHMS = {"fedavg": {}, "fedvra": {"gamma": 0.1}}


def gemm_peak(n: int = 2048, repeats: int = 10) -> float:
    """float32 GFLOP/s of an n x n matrix product with torch's threads (best of ``repeats``)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(repeats + 2):
        tic = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - tic)
    return 2 * n**3 / best / 1e9


def measure(engine: str, m: int, algorithm: str, rounds: int) -> dict:
    import torch

    import fedcompanion as fc
    from fedcompanion.engine import run as run_module  # noqa: F401
    from fedcompanion.engine.run import ENGINES

    task = fc.tasks.federated_dataset_task("mnist", 100, "dirichlet", "mlp", seed=0, alpha=0.3, hidden=(200, 200))
    samples = 0
    train, probe = ENGINES[engine]

    def counting(task_, objective, clients, **kw):
        nonlocal samples
        sizes = task_.client_sizes[clients].clamp(max=32)
        samples += int((objective.steps * sizes).sum())
        return train(task_, objective, clients, **kw)

    fc.engine.register_engine("counted", counting, probe)
    work = fc.LocalWork(epochs=1.0, batch_size=32)
    fc.run(task, fc.make(algorithm, **ALGORITHMS[algorithm]), 1, m, engine="counted", local=work,
           per_client_metrics=False, eval_every=10**6)  # warm-up
    samples = 0
    result = fc.run(task, fc.make(algorithm, **ALGORITHMS[algorithm]), rounds, m, seed=1, engine="counted",
                    local=work, per_client_metrics=False, eval_every=10**6)
    seconds = float(result.metric("compute_time").iloc[-1])
    macs = sum(p.numel() for n, p in task.model.named_parameters() if n.endswith("weight"))
    return {
        "engine": engine, "m": m, "algorithm": algorithm, "rounds": rounds,
        "rounds_per_s": rounds / seconds, "gflops": 6 * macs * samples / seconds / 1e9,
        "peak_mem_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "threads": torch.get_num_threads(),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=4, metavar=("ENGINE", "M", "ALGORITHM", "ROUNDS"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.one:
        engine, m, algorithm, rounds = args.one
        print(json.dumps(measure(engine, int(m), algorithm, int(rounds))))
        return 0

    import pandas as pd

    from fedcompanion.plots import save_figure, style

    peak = gemm_peak()
    print(f"float32 GEMM peak on this machine: {peak:.0f} GFLOP/s")
    rows = []
    for algorithm in ALGORITHMS:
        for m in MS:
            for engine in ("loop", "batched"):
                cmd = [sys.executable, __file__, "--one", engine, str(m), algorithm, str(args.rounds)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                row["pct_of_peak"] = 100 * row["gflops"] / peak
                rows.append(row)
                print(f"{algorithm:7s} m={m:3d} {engine:8s} {row['rounds_per_s']:6.2f} rounds/s "
                      f"{row['gflops']:6.1f} GFLOP/s ({row['pct_of_peak']:4.1f}% of peak) "
                      f"peak memory {row['peak_mem_gb']:.2f} GB", flush=True)
    frame = pd.DataFrame(rows)
    frame["gemm_peak_gflops"] = peak
    speedup = frame.pivot_table(index=["algorithm", "m"], columns="engine", values="rounds_per_s")
    speedup["batched / loop"] = speedup["batched"] / speedup["loop"]
    print("\n" + speedup.round(2).to_string())
    figures = ROOT / "figures"
    figures.mkdir(exist_ok=True)
    frame.to_csv(figures / "bench_engine.csv", index=False)

    import matplotlib.pyplot as plt
    import seaborn as sns

    style()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    sns.barplot(frame, x="m", y="rounds_per_s", hue="engine", ax=axes[0], errorbar=None)
    axes[0].set(ylabel="rounds per second", xlabel="clients per round m", title="speed (FedAvg and FedVRA)")
    sns.barplot(frame, x="m", y="pct_of_peak", hue="engine", ax=axes[1], errorbar=None)
    axes[1].set(ylabel="% of measured GEMM peak", xlabel="clients per round m",
                title=f"efficiency (peak {peak:.0f} GFLOP/s)")
    save_figure(fig, "bench_engine", figures)
    print(f"wrote {figures / 'bench_engine.csv'} and bench_engine.png/.pdf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
