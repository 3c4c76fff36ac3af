"""The engines side by side on a one-output float64 model: AdaFedAdam on QSAR logistic regression.

    python benchmarks/qsar_engines.py [--rounds 60] [--repeats 3]

The configuration of adafedadam/05's convex runs (16 clients of 450 rows x 1024 features, float64, 5 full-batch
local steps, every client in every round, AdaFedAdam with alpha 0), run with each engine in turn, the engines
interleaved in every repeat; prints the median milliseconds per round and the largest relative difference of each
engine's final model from the loop engine's (the readable reference; the others sum in another order).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from fedcompanion.experiments import ExperimentConfig
from fedcompanion.experiments.runner import run_config
from fedcompanion.infra.machine import describe

ENGINES = ("batched", "batched-clientwise", "batched-products", "loop")


def main() -> None:
    """Time every engine on the same run; print one line per engine."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base = ExperimentConfig(task="qsar", task_args=dict(num_clients=16), algorithm="adafedadam",
                            hyperparameters=dict(alpha=0.0, server_lr=0.03), rounds=args.rounds,
                            clients_per_round=None, lr=0.5, local=dict(steps=5, batch_size=None),
                            eval_every=args.rounds, seed=0, save_params=True)
    seconds, final = {e: [] for e in ENGINES}, {}
    for _ in range(args.repeats):
        for engine in ENGINES:
            tic = time.perf_counter()
            final[engine] = run_config(dataclasses.replace(base, engine=engine)).params
            seconds[engine].append(time.perf_counter() - tic)
    print(describe())
    reference = final["loop"]
    for engine in ENGINES:
        gap = float((final[engine] - reference).abs().max() / reference.abs().max())
        print(f"{engine:20s} {1000 * statistics.median(seconds[engine]) / args.rounds:8.1f} ms/round   "
              f"final model vs loop: {gap:.1e}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
