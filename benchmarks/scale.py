"""Cross-device scale: peak memory and rounds per second against the number of clients N and the clients per round m.

    python benchmarks/scale.py [--ns 1000 10000 50000 100000] [--ms 10 100 1000] [--rounds 5]
                                [--algorithms fedavg fedvra scaffold fedadmm]

Each point runs in a fresh process (so its peak resident memory, read from /proc/self/status VmHWM, is its own):
``fc.run`` with the default batched engine, the MNIST MLP 784-200-200-10 (P = 199,210), one local epoch of
mini-batches of 32, lr 0.05, ``m`` clients sampled uniformly, evaluated at the start and after the last round on the
global test set only (per-client metrics off: they are a separate, O(N) cost). The data: MNIST split IID over N
clients where N <= 60,000 (about one image per client at N = 50,000), else synthetic MNIST-shaped data, one sample
per client. The stateful algorithms (FedVRA, SCAFFOLD, FedADMM) keep a dual or control variate per client (FedADMM's
server a copy of each client's dual as well); it is held only for the clients ever sampled (``protocol.ZeroRows``), so
the state costs O(min(N, rounds x m) x P), not N x P (which would be 8.0 GB at N = 10,000 and 80 GB at N = 100,000 in
float32).

Prints one row per point (N, m, algorithm, task, peak RSS in GB, rounds/s and the share of a round spent in local
training, the client state's rows and GB) and
writes ``benchmarks/results/scale.csv``, the plot ``docs/scale.png`` and the page ``docs/scale.md`` (the machine, the
table, the plot).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
# rows of P floats a sampled client costs: its own state, and FedADMM's server copy of its dual
ROWS_PER_CLIENT = {"fedvra": 1, "scaffold": 1, "feddyn": 1, "fedadmm": 2}


def peak_rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def point(n: int, m: int, algorithm: str, rounds: int) -> dict:
    """One measurement, in this process."""
    import numpy as np
    import torch

    import fedcompanion as fc
    from fedcompanion.driver import Schedule

    torch.set_num_threads(1)
    if n <= 60_000:
        task = fc.tasks.federated_dataset_task("mnist", n, "iid", "mlp", seed=0)
        kind = "mnist"
    else:  # one MNIST-shaped sample per client
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(n + 1000, 784)).astype(np.float32), rng.integers(0, 10, n + 1000)
        net = fc.models.make_model("mlp", 784, 10)
        test = fc.data.ArrayDataset(torch.as_tensor(x[n:]), torch.as_tensor(y[n:]), 10)
        task = fc.tasks.from_client_arrays(f"synthetic/{n}", [(x[i:i + 1], y[i:i + 1]) for i in range(n)], net,
                                           "cross_entropy", test=test)
        kind = "synthetic"
    built = peak_rss_gb()
    local = fc.LocalWork(epochs=1, batch_size=32)
    training = [0.0]  # seconds inside the engine's local training (the rest of a round: sampling, state, server)
    train, probe = fc.engine.ENGINES["batched"]

    def timed(*args, **kwargs):
        tic = time.perf_counter()
        out = train(*args, **kwargs)
        training[0] += time.perf_counter() - tic
        return out

    fc.engine.register_engine("batched-timed", timed, probe)
    tic = time.perf_counter()
    result = fc.run(task, fc.make(algorithm), rounds=rounds, clients_per_round=m, seed=0, lr=0.05, local=local,
                    eval_every=rounds, per_client_metrics=False, eval_train=False, engine="batched-timed")
    seconds = time.perf_counter() - tic
    compute = float(result.timing.compute_time.iloc[-1])  # the rounds without the evaluations
    schedule = Schedule(task, "uniform", m, local, 0, 0.05)
    sampled = set().union(*(schedule.info(r).clients.tolist() for r in range(rounds)))
    rows = len(sampled) * ROWS_PER_CLIENT.get(algorithm, 0)
    p = task.num_params
    return {"N": n, "m": m, "algorithm": algorithm, "task": kind, "rounds": rounds, "status": result.status,
            "peak_rss_gb": round(peak_rss_gb(), 3), "task_rss_gb": round(built, 3),
            "rounds_per_s": round(rounds / compute, 3), "training_share": round(training[0] / compute, 3),
            "wall_s": round(seconds, 2), "state_rows": rows,
            "state_gb": round(rows * p * 4 / 2**30, 3), "dense_state_gb": round(n * p * 4 / 2**30, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", type=int, nargs="+", default=[1000, 10_000, 50_000, 100_000])
    parser.add_argument("--ms", type=int, nargs="+", default=[100])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--algorithms", nargs="+", default=["fedavg", "fedvra", "scaffold", "fedadmm"])
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "scale.csv"))
    parser.add_argument("--no-docs", dest="docs", action="store_false", help="do not write docs/scale.{md,png}")
    parser.add_argument("--point", nargs=3, metavar=("N", "M", "ALGORITHM"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.point:
        n, m, algorithm = args.point
        print(json.dumps(point(int(n), int(m), algorithm, args.rounds)))
        return 0
    rows = []
    for n in args.ns:
        for m in args.ms:
            for algorithm in args.algorithms:
                out = subprocess.run([sys.executable, __file__, "--rounds", str(args.rounds), "--point", str(n),
                                      str(m), algorithm], capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    print(f"N={n} m={m} {algorithm}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
                    continue
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    table = pd.DataFrame(rows)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.output, index=False)
    if args.docs:
        write_page(table, " ".join(sys.argv[1:]))
    print(f"\nwrote {args.output}" + (" and docs/scale.md, docs/scale.png" if args.docs else ""))
    return 0


def write_page(table: pd.DataFrame, arguments: str) -> None:
    """``docs/scale.png`` (peak RSS, rounds/s and the training share against N, one line per algorithm and m) and
    ``docs/scale.md``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedcompanion.infra.machine import describe

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for (algorithm, m), group in table.groupby(["algorithm", "m"]):
        group = group.sort_values("N")
        for ax, column in zip(axes, ("peak_rss_gb", "rounds_per_s", "training_share")):
            ax.plot(group.N, group[column], marker="o", label=f"{algorithm}, m = {m}")
    dense = table.drop_duplicates("N").sort_values("N")
    axes[0].plot(dense.N, dense.dense_state_gb, "k--", label="one dense N x P float32 state")
    axes[0].axhline(24, color="grey", lw=0.8)
    axes[0].text(dense.N.max(), 26, "this machine's 24 GiB", color="grey", fontsize=8, ha="right")
    for ax, label in zip(axes, ("peak resident memory (GB)", "rounds per second (computation)",
                                "share of a round in local training")):
        ax.set(xscale="log", yscale="log" if ax is not axes[2] else "linear", xlabel="clients N", ylabel=label)
        ax.grid(alpha=0.3)
    axes[2].set_ylim(0, 1)
    axes[2].axhline(0.75, color="grey", lw=0.8, ls=":")
    axes[2].text(table.N.max(), 0.77, "75%: the target for FedVRA at m = 500", color="grey", fontsize=8, ha="right")
    axes[0].legend(fontsize=7, loc="upper left")
    axes[0].set_ylim(top=400)
    fig.suptitle("MNIST MLP (P = 199,210), 5 rounds; N > 60,000: synthetic MNIST-shaped data, one sample a client")
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "scale.png", dpi=110)
    columns = ["N", "m", "algorithm", "task", "peak_rss_gb", "rounds_per_s", "training_share", "state_rows", "state_gb",
               "dense_state_gb"]
    lines = ["# Scale: many clients on one machine", "",
             "Generated by `python benchmarks/scale.py " + arguments + "` (do not edit by hand). Machine: "
             + describe() + "; one torch thread.", "",
             "The stateful algorithms keep a dual (FedVRA, FedADMM) or a control variate (SCAFFOLD) per client, and "
             "FedADMM's server a copy of each client's dual. They are held only for the clients ever sampled (an "
             "unsampled client's row is one shared zero), so the state costs "
             "`state_rows` x P floats, where a dense N x P block would cost `dense_state_gb`. `rounds_per_s` counts "
             "the rounds' computation (the two evaluations excluded); `training_share` is the part of it spent in the "
             "engine's local training, the rest being the round outside it: sampling, gathering and replacing the "
             "active clients' state, the uploads' [m, P] algebra and the server update.", "",
             "![peak memory and speed against N](scale.png)", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for _, row in table[columns].iterrows()]
    (ROOT / "docs" / "scale.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
