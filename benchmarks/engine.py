"""Engine benchmark: rounds per second of fedcompanion's engines against a plain torch loop (and Flower's
simulation engine when the ``[flower]`` extra is installed), side by side in one run.

    python benchmarks/engine.py [--rounds 3] [--repeats 4] [--ms 10 50 100] [--device cpu] [--output engine.csv]

Workload (the same for every column): MNIST, MLP 784-200-200-10, 100 clients (Dirichlet 0.3), m clients per
round sampled uniformly, one local epoch of mini-batches of 32, lr 0.05. Each column runs ``--rounds`` rounds
after one warm-up round, ``--repeats`` times interleaved with the others; the table shows medians, with
evaluation and start-up excluded. GFLOP/s count the flops the engines execute on the sampled schedule (the clients
and step counts of the measured rounds): per sample, the forward product (M multiply-adds), the weight gradient (M)
and the gradient passed down to every layer but the first (M - M_1), two flops each, as
``benchmarks/reproduce_bound.py`` counts them. "% of peak" is against a float32 matrix product on all the cores
measured in the same run (before the first m and after each m's repeats; the best of these, so that a slow moment at
the start cannot inflate the percentages). Every line names the CPU. Writes ``benchmarks/results/engine.csv``
(``engine-DEVICE.csv`` off the CPU; ``--output`` names another file there).

Columns: ``batched`` and ``loop`` are ``fc.run(..., engine=...)`` (FedAvg and FedVRA; on a CPU the batched engine
runs each client on one thread, ``fedcompanion.engine.clientwise``); ``batched products`` (CPU only) is the batched
engine with its products over all clients, as on a GPU (``engine="batched-products"``); ``plain torch`` is the same
FedAvg round (the same sampled clients) written as a plain ``nn.Module`` + ``torch.optim.SGD`` loop over the clients,
run as one process per core with one thread each (its fair use of the machine: one process runs as fast on one thread
as on two), the round's clients shared between them;
``flower`` is the same FedAvg round as a Flower simulation (``fedcompanion.flower``).
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import fedcompanion as fc
from fedcompanion.engine import batch_indices
from fedcompanion.infra.machine import describe

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
    engine = "batched-products" if engine == "batched" and not clientwise else engine
    result = fc.run(task, fc.make(algorithm, **hp), rounds, m, seed=1, engine=engine, lr=0.05,
                    local=fc.LocalWork(epochs=1.0, batch_size=32), per_client_metrics=False, eval_every=10**6,
                    device=device)
    return rounds / float(result.timing.compute_time.iloc[-1])


def _schedule(task, m):
    """The schedule every column plays: seed 1, m clients per round sampled uniformly, one epoch of batches of 32."""
    return fc.driver.Schedule(task, "uniform", m, fc.LocalWork(epochs=1.0, batch_size=32), 1, 0.05)


_PLAIN: dict = {}


def _plain_init(device: str) -> None:
    torch.set_num_threads(1)
    task = fc.tasks.federated_dataset_task("mnist", 100, "dirichlet", "mlp", seed=0, alpha=0.3).to(device)
    _PLAIN.update(task=task, model=copy.deepcopy(task.model), device=device)


def _plain_clients(x: torch.Tensor, r: int, work: list[tuple[int, int]]) -> tuple[torch.Tensor, float]:
    """Plain torch local SGD for ``work`` = [(client, steps)] of round r from x: (sum of n_i x_i, sum of n_i)."""
    task, model, device = _PLAIN["task"], _PLAIN["model"], _PLAIN["device"]
    total, weight = torch.zeros_like(x), 0.0
    for i, steps in work:
        inputs, targets = task.client_data(i)
        n = int(task.client_sizes[i])
        torch.nn.utils.vector_to_parameters(x.clone(), model.parameters())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for rows in batch_indices(1, r, i, n, steps, 32).to(device):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(inputs[rows]), targets[rows]).backward()
            optimizer.step()
        total += n * torch.nn.utils.parameters_to_vector(model.parameters()).detach()
        weight += n
    return total, weight


def plain_round_rate(task, m, rounds, cores: int, device: str) -> float:
    """The same FedAvg rounds (the engines' sampled clients and steps) as a plain torch loop, the round's clients
    shared between ``cores`` processes of one thread each (balanced by their samples); one warm-up round, which also
    starts the processes. The processes live for this measurement only: kept idle beside the other columns, they
    slowed the loop engine and the batched products by more than half."""
    with ProcessPoolExecutor(cores, mp_context=get_context("spawn"), initializer=_plain_init,
                             initargs=(device,)) as pool:
        return _plain_rounds(pool, task, m, rounds, cores)


def _plain_rounds(pool, task, m, rounds, cores: int) -> float:
    schedule, sizes = _schedule(task, m), task.client_sizes.numpy()
    x = task.init_params(1)
    tic = None
    for r in range(rounds + 1):
        if r == 1:
            tic = time.perf_counter()
        info = schedule.info(r)
        shares: list[list[tuple[int, int]]] = [[] for _ in range(cores)]
        loads = [0] * cores
        for i, steps in sorted(zip(info.clients.tolist(), info.steps.tolist()), key=lambda c: -c[1] * sizes[c[0]]):
            k = loads.index(min(loads))
            shares[k].append((i, int(steps)))
            loads[k] += steps * min(32, int(sizes[i]))
        parts = [f.result() for f in [pool.submit(_plain_clients, x, r, share) for share in shares if share]]
        x = sum(t for t, _ in parts) / sum(w for _, w in parts)
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
        eval_every=1, per_client_metrics=False, seed=1)  # a time row every round; evaluate=False: nothing evaluated
    result = simulate(config, evaluate=False)
    times = result.timing.compute_time.to_numpy()
    return rounds / float(times[-1] - times[0])  # start-up and the first (warm-up) round excluded


def linear_macs(model: torch.nn.Module) -> tuple[int, int] | None:
    """(M, M_1): multiply-adds per sample of all Linear layers and of the first; None if the model has other
    parametrised layers (its cost is not two products per layer)."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    others = [m for m in model.modules() if not list(m.children()) and list(m.parameters(recurse=False))
              and not isinstance(m, torch.nn.Linear)]
    if not layers or others:
        return None
    macs = [m.in_features * m.out_features for m in layers]
    return sum(macs), macs[0]


def flops_per_round(task, m, rounds: int, first: int = 0) -> float:
    """Mean flops per round that the engines execute in rounds ``first .. first + rounds - 1`` of the schedule:
    2 x (2M + (M - M_1)) per sample processed."""
    macs, first_layer = linear_macs(task.model)
    schedule, sizes = _schedule(task, m), task.client_sizes.numpy()
    samples = 0
    for r in range(first, first + rounds):
        info = schedule.info(r)
        samples += int((info.steps.numpy() * np.minimum(32, sizes[info.clients.numpy()])).sum())
    return 2.0 * (2 * macs + macs - first_layer) * samples / rounds


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
    peaks = [gemm_peak(device)]
    threads, cores = torch.get_num_threads(), os.cpu_count() or 1
    cpu = describe()
    print(f"{cpu}; device {device}, {threads} torch threads; float32 matrix-product peak {peaks[0]:.0f} GFLOP/s")
    def engine_column(engine, algorithm, hp, clientwise=True):
        return lambda m: engine_round_rate(task, m, algorithm, hp, engine, args.rounds, device, clientwise)

    algorithms = (("fedavg", {}), ("fedvra", {"gamma": 0.1}))
    columns = {f"{engine} {name}": engine_column(engine, name, hp) for engine in ("batched", "loop")
               for name, hp in algorithms}
    if device == "cpu":
        columns.update({f"batched products {name}": engine_column("batched", name, hp, clientwise=False)
                        for name, hp in algorithms})
    columns[f"plain torch fedavg ({cores} processes)"] = lambda m: plain_round_rate(task, m, args.rounds, cores, device)
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
        for name, rates in measured.items():
            if not rates:
                continue
            rate = statistics.median(rates)
            warm = 1 if name.startswith(("plain", "flower")) else 0  # their first round is a warm-up, not timed
            gflop = flops_per_round(task, m, args.rounds, first=warm) / 1e9
            rows.append(dict(column=name, m=m, rounds_per_s=rate, gflops=gflop * rate, repeats=len(rates),
                             device=device, threads=threads, cpu=cpu))
    peak = max(peaks)
    print(f"float32 matrix-product peak, measured {len(peaks)} times: " + ", ".join(f"{p:.0f}" for p in peaks)
          + f" GFLOP/s; the table uses the best, {peak:.0f}")
    frame = pd.DataFrame(rows).assign(peak_gflops=peak)
    frame["pct_of_peak"] = 100 * frame.gflops / peak
    table = frame.pivot(index="column", columns="m", values="rounds_per_s")
    for m in args.ms:
        table[f"% peak (m={m})"] = frame[frame.m == m].set_index("column").pct_of_peak
    print(f"\n{cpu}\nrounds per second (median of repeats), and % of the measured float32 peak:")
    print(table.round(2).to_string())
    plain = next(c for c in table.index if c.startswith("plain torch"))
    base = table.loc[plain]
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
