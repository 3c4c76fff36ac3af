"""benchmarks/reproduce_bound.py counts the multiply-adds a run does: checked against a count by hand."""
import importlib.util
from pathlib import Path

import numpy as np
from torch import nn

from fedcompanion.experiments import ExperimentConfig

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduce_bound.py"
spec = importlib.util.spec_from_file_location("reproduce_bound", SCRIPT)
bound = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bound)


def test_linear_macs():
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 10))
    assert bound.linear_macs(mlp) == (784 * 200 + 200 * 10, 784 * 200)
    assert bound.linear_macs(nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4, 2))) is None


def _meta(algorithm, **hyperparameters):
    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=5), algorithm=algorithm,
                              hyperparameters=hyperparameters, rounds=2, clients_per_round=None, lr=0.1,
                              local=dict(steps=3, batch_size=2), eval_every=1, per_client_metrics=False)
    return {"config": dict(config.__dict__), "diverged_round": None}


def test_run_flops_by_hand():
    """4 least-squares clients (115, 142, 108, 93 rows), a 5 -> 1 linear model, full participation, 2 rounds of 3
    steps of batches of 2, evaluated on the training data at rounds 0, 1 and 2."""
    meta = _meta("fedavg")
    samples = 2 * 4 * 3 * 2  # rounds x clients x steps x batch
    per_sample = 5 + 5 + 0  # forward, weight gradient, nothing passed below the first layer
    evaluated = 3 * (115 + 142 + 108 + 93) * 5
    assert bound.run_flops(meta, np.array([0, 1, 2])) == 2 * (samples * per_sample + evaluated)
    meta["diverged_round"] = 1  # stopped after round 1: one round of local work
    assert bound.run_flops(meta, np.array([0, 1])) == 2 * (samples // 2 * per_sample + 2 * (115 + 142 + 108 + 93) * 5)


def test_probes_are_counted_only_where_the_algorithm_probes():
    """SCAFFOLD's option I probes each active client's full gradient every round, option II does not (a property of
    the instance: read off the class it was always true, and counted probes that never ran)."""
    rounds = np.array([0, 1, 2])
    plain = bound.run_flops(_meta("fedavg"), rounds)
    assert bound.run_flops(_meta("scaffold", option="II"), rounds) == plain
    probes = 2 * (115 + 142 + 108 + 93) * (5 + 5)  # rounds x every client's rows x (forward + gradient)
    assert bound.run_flops(_meta("scaffold", option="I"), rounds) == plain + 2 * probes


def test_loss_only_probes_count_a_forward_pass():
    """q-FedAvg probes each active client's loss only: its rows times the forward product, every round."""
    rounds = np.array([0, 1, 2])
    probes = 2 * (115 + 142 + 108 + 93) * 5  # rounds x every client's rows x forward
    assert bound.run_flops(_meta("qfedavg"), rounds) == bound.run_flops(_meta("fedavg"), rounds) + 2 * probes


def test_engine_benchmark_counts_the_flops_of_the_sampled_schedule():
    """Issue 33: benchmarks/engine.py counted 6 multiply-adds per sample and the expected samples. Two clients of 40
    and 10 rows, both active, one epoch of batches of 32: 2 x 32 + 1 x 10 = 74 samples a round; an MLP 3-4-2 has
    M = 12 + 8 and M_1 = 12, so 2 x (2M + M - M_1) = 96 flops a sample: 7104 a round."""
    import torch

    import fedcompanion as fc

    engine_spec = importlib.util.spec_from_file_location("engine_bench", SCRIPT.parent / "engine.py")
    engine = importlib.util.module_from_spec(engine_spec)
    engine_spec.loader.exec_module(engine)
    rng = np.random.default_rng(0)
    clients = [(rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 2, n)) for n in (40, 10)]
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    task = fc.tasks.from_client_arrays("two", clients, net, "cross_entropy", dtype=torch.float32)
    assert engine.flops_per_round(task, 2, rounds=3) == 7104.0
