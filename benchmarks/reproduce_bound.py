"""How fast can ``make reproduce`` be on this machine? The arithmetic of the paper-scale runs at the GEMM peak.

    python benchmarks/reproduce_bound.py [--results results]

For every run in the cache whose model is a stack of ``Linear`` layers (MLPs, softmax and logistic regression), it
counts the multiply-adds the batched engine does, from the run's own schedule (the sampled clients, their local
step counts and batch sizes, every round the run actually played):

- local steps: per sample, the forward product (M multiply-adds, M = sum of in x out over the layers), the weight
  gradient (M) and the gradient passed down to each layer but the first (M - M_1);
- probes (AdaFedAdam, SCAFFOLD option I): the same passes over each active client's probe data, every round;
  q-FedAvg's probe (its losses only): the forward product;
- evaluations: one forward pass over what the run evaluates (the test set; the clients' training data when it
  evaluates them; the clients' held-out splits), at every round its history records.

Two flops per multiply-add; divided by the float32 GEMM peak of one thread (every run of a sweep computes with
one) times the CPU count, that is a time no schedule can beat: a lower bound for these runs. Runs of other models
(the ADMM solvers, the two-block clustering) are listed at their recorded wall time, not bounded. The recorded
``make reproduce`` time (``results/summaries/_timings.json``) is printed beside the bound.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fedcompanion import make
from fedcompanion.driver import Schedule
from fedcompanion.engine import LocalWork
from fedcompanion.engine.schedule import batch_size_for
from fedcompanion.experiments import RUN_THREADS, ExperimentConfig, build_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import gemm_peak, linear_macs  # noqa: E402  (benchmarks/engine.py: the same peak and count)

ROOT = Path(__file__).resolve().parents[1]


def run_flops(meta: dict, history_rounds: np.ndarray) -> float | None:
    """Flops of one cached engine run (None if its model is not a stack of Linear layers)."""
    fields = {k: v for k, v in meta["config"].items() if k != "code"}
    config = ExperimentConfig(**fields)
    if make(config.algorithm, **config.hyperparameters).solves_exactly:  # no engine kernel runs
        return None
    task = build_task(config)
    macs = linear_macs(task.model)
    if macs is None:
        return None
    m, m1 = macs
    step_macs = 2 * m + (m - m1)  # forward, weight gradient, gradient passed down
    local = LocalWork(**config.local)
    schedule = Schedule(task, config.sampling, config.clients_per_round, local, config.seed, config.lr)
    sizes = task.client_sizes.numpy()
    algorithm = make(config.algorithm, **config.hyperparameters)
    played = meta["diverged_round"] or config.rounds
    samples = probed = 0
    for r in range(played):
        info = schedule.info(r)
        active = info.clients.numpy()
        widths = np.array([batch_size_for(int(n), local.batch_size) for n in sizes[active]])
        samples += int((info.steps.numpy() * widths).sum())
        if algorithm.needs_probe:
            probed += int(np.minimum(sizes[active], algorithm.probe_samples or np.inf).sum())
    evaluated = 0
    if config.eval_train:
        evaluated += int(sizes.sum())
    if task.test is not None:
        evaluated += len(task.test.y)
    if task.client_test is not None:
        evaluated += int(task.client_test.sizes.sum())
    probe_macs = step_macs if algorithm.probe_gradient else m  # a loss-only probe is a forward pass
    return 2.0 * (samples * step_macs + probed * probe_macs + len(history_rounds) * evaluated * m)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(ROOT / "results"))
    args = parser.parse_args()
    folder = Path(args.results)
    torch.set_num_threads(RUN_THREADS)  # as every run of a sweep
    peak = gemm_peak("cpu")
    cores = os.cpu_count() or 1
    counted, other = [], []
    for path in sorted(folder.glob("*.json")):
        meta = json.loads(path.read_text())
        rounds = pd.read_csv(path.with_suffix(".csv.gz"), usecols=["round"])["round"].unique()
        flops = run_flops(meta, rounds)
        compute = (meta.get("timing") or {}).get("compute_time") or [0.0]
        row = {"run": path.stem, "algorithm": meta["config"]["algorithm"], "wall": meta["wall_time"],
               "compute": compute[-1], "flops": flops}
        (other if flops is None else counted).append(row)
    counted, other = pd.DataFrame(counted), pd.DataFrame(other)
    tflop = counted.flops.sum() / 1e12
    bound = counted.flops.sum() / (peak * 1e9 * cores)
    achieved = counted.flops.sum() / counted.compute.sum() / 1e9
    print(f"float32 GEMM peak, one thread: {peak:.1f} GFLOP/s; {cores} cores")
    print(f"{len(counted)} runs of Linear-layer models: {tflop:.1f} TFLOP; their recorded compute time "
          f"{counted.compute.sum():.0f} s ({achieved:.1f} GFLOP/s per run process, {achieved / peak:.0%} of the "
          f"one-thread peak, as the sweeps ran them: {cores} processes at a time)")
    print(f"lower bound for them on {cores} cores at the peak: {bound:.0f} s")
    if len(other):
        print(f"{len(other)} other runs (ADMM solvers, two-block clustering), recorded wall time "
              f"{other.wall.sum():.0f} s (not bounded)")
    timings = folder / "summaries" / "_timings.json"
    if timings.exists():
        recorded = json.loads(timings.read_text())
        notebooks = sum(recorded.get("notebooks", {}).values())
        elapsed = recorded.get("elapsed")
        print(f"recorded make reproduce: {elapsed:.0f} s elapsed ({recorded.get('parallel')} notebook(s) at a time), "
              f"sum of the notebooks {notebooks:.0f} s; elapsed / bound = {elapsed / bound:.2f}")
    print(f"20 minutes = {1200 / bound:.2f} x the bound")


if __name__ == "__main__":
    main()
