"""Does successive halving choose what the full grid chooses? Fig. 3's tuning (notebook fedvra/04, uniform weights),
or an arena task's (notebook 92, ``--arena mnist-dirichlet``), both ways, at the evaluation horizon and on the same
tuning seeds.

    python benchmarks/halving.py [--arena TASK] [--results results] [--scratch build/halving-results] [--jobs 2]

``tune(rungs=3, eta=3)`` (what the notebook runs: every setting 10 rounds, the best third 20, the best of those and
the default all 40) against ``tune(rungs=1)`` (every setting of the 3 x 3 grid for all 40 rounds on both tuning seeds).
For each method: both choices, the full-horizon score of each (the mean test accuracy over the evaluations, as the
claim is judged), the difference, and the rounds each spent. The runs go to a scratch copy of the cache (hard links to
the committed runs), so the full grid's extra runs never enter ``results/``.
"""
from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from fedcompanion.experiments import ExperimentConfig, Spec, log_grid, mean_score, tune

METHODS = {  # as notebooks/fedvra/04_against_baselines.ipynb: method -> (algorithm, own default, fixed)
    "FedAvg": ("fedavg", {"server_lr": 1.0}, {}),
    "FedProx": ("fedprox", {"mu": 0.01}, {}),
    "SCAFFOLD": ("scaffold", {"server_lr": 1.0}, {"option": "II"}),
    "FedDyn": ("feddyn", {"alpha": 0.01}, {}),
    "FedADMM": ("fedadmm", {"gamma": 0.01}, {}),
    "FedVRA": ("fedvra", {"gamma": 0.01}, {"aggregation_stepsize": "inverse_probability", "dual_stepsize": 1.0}),
}
LR, ROUNDS, TUNE_SEEDS, SEEDS = 0.1, 40, [100, 101], list(range(8))


def config(method: str, setting: dict, seed: int) -> ExperimentConfig:
    """The notebook's run of ``method`` at ``setting`` (uniform weights, its paper-profile parameters)."""
    algorithm, _, fixed = METHODS[method]
    return ExperimentConfig(
        task="dataset", task_args=dict(dataset="mnist", num_clients=50, partition_scheme="dirichlet", alpha=0.1,
                                       weights="uniform"),
        algorithm=algorithm, hyperparameters={**{k: v for k, v in setting.items() if k != "lr"}, **fixed},
        rounds=ROUNDS, clients_per_round=5, lr=setting["lr"], local=dict(steps_range=[5, 50], batch_size=32),
        eval_every=10, per_client_metrics=False, eval_train=False, seed=seed, label=method)


def specs() -> dict[str, Spec]:
    out = {}
    for m, (_, own, _) in METHODS.items():
        default = {"lr": LR, **own}
        out[m] = Spec(lambda s, seed, m=m: config(m, s, seed), {k: log_grid(v, 1.0, 3) for k, v in default.items()},
                      default)
    return out


def arena_specs(task: str):
    """The arena's tuning of every method on ``task`` as notebook 92 runs it (its paper profile): the specs, the tuning
    and evaluation seeds, the score."""
    from fedcompanion.experiments import final_score
    from fedcompanion.reproduction import arena

    plan = arena.Plan(rounds=30, seeds=tuple(range(8)), tune_seeds=(100, 101))
    t = arena.TASKS[task]
    sign = 1.0 if t.better == "higher" else -1.0
    return (arena.specs(t, list(arena.METHODS), plan), list(plan.tune_seeds), list(plan.seeds),
            lambda frame: sign * final_score(t.metric)(frame))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arena", default="", help="an arena task (e.g. mnist-dirichlet) instead of Fig. 3")
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--scratch", type=Path, default=Path("build/halving-results"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if not args.scratch.exists():  # hard links: the committed runs are read, never written
        args.scratch.mkdir(parents=True)
        for f in args.results.glob("*.*"):
            if f.is_file():
                os.link(f, args.scratch / f.name)
        shutil.copytree(args.results / "summaries", args.scratch / "summaries")
    if args.arena:
        made, tune_seeds, seeds, score = arena_specs(args.arena)
    else:
        made, tune_seeds, seeds, score = specs(), TUNE_SEEDS, SEEDS, mean_score("test_accuracy")
    halving = tune(made, tune_seeds, score, args.scratch, evaluation_seeds=seeds, jobs=args.jobs)
    full = tune(made, tune_seeds, score, args.scratch, evaluation_seeds=seeds, jobs=args.jobs, rungs=1)
    print("| method | successive halving: choice | its score | full grid: choice | its score | difference | "
          "rounds: halving / full |")
    print("|---|---|---|---|---|---|---|")
    for m in made:
        h, f = halving[m], full[m]
        at = f.table().set_index(list(f.grid)).score  # every setting's full-horizon score
        key = tuple(h.setting[k] for k in f.grid) if len(f.grid) > 1 else h.setting[next(iter(f.grid))]
        h_full = float(at.loc[key]) if key in at.index else float("nan")  # nan: outside the full grid's search
        print(f"| {m} | {h.setting} | {h_full:.4f} | {f.setting} | {f.score:.4f} | {h_full - f.score:+.4f} | "
              f"{h.rounds_run} / {f.rounds_run} |")


if __name__ == "__main__":
    main()
