"""Engine benchmark: rounds per second of fedcompanion's engines against a plain torch loop (and Flower's
simulation engine when the ``[flower]`` extra is installed), side by side in one run.

    python benchmarks/engine.py [--rounds 3] [--repeats 4] [--ms 10 50 100] [--device cpu] [--output engine.csv]

Workload (the same for every column): MNIST, MLP 784-200-200-10, 100 clients (Dirichlet 0.3), m clients per
round sampled uniformly, one local epoch of mini-batches of 32, lr 0.05. Each column runs ``--rounds`` rounds
after one warm-up round, ``--repeats`` times interleaved with the others; the table shows medians, with
evaluation and start-up excluded. GFLOP/s count 6 x multiply-adds per sample processed (forward and backward);
"% of peak" is against a float32 matrix product measured in the same run (before the first m and after each m's
repeats; the best of these, so that a slow moment at the start cannot inflate the percentages). Writes
``benchmarks/results/engine.csv`` (``engine-DEVICE.csv`` off the CPU; ``--output`` names another file there).

Columns: ``batched`` and ``loop`` are ``fc.run(..., engine=...)`` (FedAvg and FedVRA; on a CPU the batched engine
runs each client on one thread, ``fedcompanion.engine.clientwise``); ``batched products`` (CPU only) is the batched
engine with its products over all clients, as on a GPU (``batched.CLIENTWISE = False``); ``plain torch`` is the same
FedAvg round written as a plain ``nn.Module`` + ``torch.optim.SGD`` loop over the clients, one after another;
``flower`` is the same FedAvg round as a Flower simulation (``fedcompanion.flower``).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import fedcompanion as fc
from fedcompanion.engine import batch_indices, batched

ROOT = Path(__file__).resolve().parents[1]


def gemm_peak(device: str, n: int = 2048, repeats: int = 10) -> float:
    """float32 GFLOP/s of an n x n matrix product (best of ``repeats``)."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    best = float("inf")
    for _ in range(repeats + 2):
        _sync(device)
        tic = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - tic)
    return 2 * n**3 / best / 1e9


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def engine_round_rate(task, m, algorithm, hp, engine, rounds, device, clientwise=True) -> float:
    """Rounds per second of ``fc.run`` (evaluation excluded: its timing counts computation only); ``clientwise=False``:
    the batched engine's products over clients on a CPU too (its GPU path)."""
    before, batched.CLIENTWISE = batched.CLIENTWISE, clientwise
    try:
        result = fc.run(task, fc.make(algorithm, **hp), rounds, m, seed=1, engine=engine, lr=0.05,
                        local=fc.LocalWork(epochs=1.0, batch_size=32), per_client_metrics=False, eval_every=10**6,
                        device=device)
    finally:
        batched.CLIENTWISE = before
    return rounds / float(result.timing.compute_time.iloc[-1])


def plain_round_rate(task, m, rounds, device) -> float:
    """The same FedAvg rounds, written as a plain torch training loop (clients one after another)."""
    task = task.to(device)
    x = task.init_params(1)
    model = copy.deepcopy(task.model)
    rng = np.random.default_rng(0)
    sizes = task.client_sizes.numpy()
    tic = time.perf_counter()
    for r in range(rounds):
        active = np.sort(rng.choice(task.num_clients, m, replace=False))
        total, weight = torch.zeros_like(x), 0.0
        for i in active.tolist():
            inputs, targets = task.client_data(i)
            steps = int(np.ceil(sizes[i] / min(32, sizes[i])))
            torch.nn.utils.vector_to_parameters(x.clone(), model.parameters())
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            for rows in batch_indices(1, r, i, int(sizes[i]), steps, 32).to(device):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(inputs[rows]), targets[rows]).backward()
                optimizer.step()
            total += float(sizes[i]) * torch.nn.utils.parameters_to_vector(model.parameters()).detach()
            weight += float(sizes[i])
        x = total / weight
    _sync(device)
    return rounds / (time.perf_counter() - tic)


def flower_round_rate(m, rounds) -> float | None:
    """The same FedAvg rounds on Flower's simulation engine (None without the ``[flower]`` extra)."""
    try:
        from fedcompanion.flower import simulate
    except ImportError:
        return None
    config = fc.experiments.ExperimentConfig(
        task="dataset", task_args=dict(dataset="mnist", num_clients=100, partition_scheme="dirichlet", alpha=0.3),
        algorithm="fedavg", rounds=rounds + 1, clients_per_round=m, lr=0.05, local=dict(epochs=1.0, batch_size=32),
        eval_every=10**6, per_client_metrics=False, seed=1)
    result = simulate(config, evaluate=False)
    times = result.timing.compute_time.to_numpy()
    return rounds / float(times[-1] - times[0])  # start-up and the first (warm-up) round excluded


def samples_per_round(task, m) -> float:
    """Expected samples processed per round under uniform sampling of m clients (one epoch, batches of 32)."""
    sizes = task.client_sizes.numpy()
    per_client = np.ceil(sizes / np.minimum(32, sizes)) * np.minimum(32, sizes)
    return m * float(per_client.mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--ms", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output", help="file name under benchmarks/results/ (default: engine.csv)")
    parser.add_argument("--no-flower", action="store_true")
    parser.add_argument("--flower-repeats", type=int, default=1, help="each repeat starts Ray anew (about 30 s)")
    args = parser.parse_args()
    device = args.device
    task = fc.tasks.federated_dataset_task("mnist", 100, "dirichlet", "mlp", seed=0, alpha=0.3).to(device)
    macs = sum(p.numel() for n, p in task.model.named_parameters() if n.endswith("weight"))
    peaks = [gemm_peak(device)]
    threads = torch.get_num_threads()
    print(f"device {device}, {threads} torch threads; float32 matrix-product peak {peaks[0]:.0f} GFLOP/s")
    def engine_column(engine, algorithm, hp, clientwise=True):
        return lambda m: engine_round_rate(task, m, algorithm, hp, engine, args.rounds, device, clientwise)

    algorithms = (("fedavg", {}), ("fedvra", {"gamma": 0.1}))
    columns = {f"{engine} {name}": engine_column(engine, name, hp) for engine in ("batched", "loop")
               for name, hp in algorithms}
    if device == "cpu":
        columns.update({f"batched products {name}": engine_column("batched", name, hp, clientwise=False)
                        for name, hp in algorithms})
    columns["plain torch fedavg"] = lambda m: plain_round_rate(task, m, args.rounds, device)
    if not args.no_flower and device == "cpu":
        columns["flower fedavg"] = lambda m: flower_round_rate(m, args.rounds)
    rows = []
    for m in args.ms:
        for name, fn in columns.items():  # warm-up (Flower's simulation excludes its own start-up)
            if not name.startswith("flower"):
                fn(m)
        measured = {name: [] for name in columns}
        for repeat in range(args.repeats):
            for name, fn in columns.items():
                if name.startswith("flower") and repeat >= args.flower_repeats:
                    continue
                rate = fn(m)
                if rate is not None:
                    measured[name].append(rate)
        peaks.append(gemm_peak(device))
        gflop = 6 * macs * samples_per_round(task, m) / 1e9
        for name, rates in measured.items():
            if not rates:
                continue
            rate = statistics.median(rates)
            rows.append(dict(column=name, m=m, rounds_per_s=rate, gflops=gflop * rate, repeats=len(rates),
                             device=device, threads=threads))
    peak = max(peaks)
    print(f"float32 matrix-product peak, measured {len(peaks)} times: " + ", ".join(f"{p:.0f}" for p in peaks)
          + f" GFLOP/s; the table uses the best, {peak:.0f}")
    frame = pd.DataFrame(rows).assign(peak_gflops=peak)
    frame["pct_of_peak"] = 100 * frame.gflops / peak
    table = frame.pivot(index="column", columns="m", values="rounds_per_s")
    for m in args.ms:
        table[f"% peak (m={m})"] = frame[frame.m == m].set_index("column").pct_of_peak
    print("\nrounds per second (median of repeats), and % of the measured float32 peak:")
    print(table.round(2).to_string())
    base = table.loc["plain torch fedavg"]
    print("\nratios at each m: batched / plain torch = " + ", ".join(
        f"{table.loc['batched fedavg', m] / base[m]:.2f} (m={m})" for m in args.ms))
    if "batched products fedavg" in table.index:
        for name in ("fedavg", "fedvra"):
            print(f"                   batched / batched products ({name}) = " + ", ".join(
                f"{table.loc[f'batched {name}', m] / table.loc[f'batched products {name}', m]:.2f} (m={m})"
                for m in args.ms))
    print("                   loop / plain torch    = " + ", ".join(
        f"{table.loc['loop fedavg', m] / base[m]:.2f} (m={m})" for m in args.ms))
    if "flower fedavg" in table.index:
        print("                   batched / flower      = " + ", ".join(
            f"{table.loc['batched fedavg', m] / table.loc['flower fedavg', m]:.2f} (m={m})" for m in args.ms))
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    name = args.output or ("engine.csv" if device == "cpu" else f"engine-{device.replace(':', '')}.csv")
    frame.to_csv(out / name, index=False)
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
