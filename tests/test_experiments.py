"""Configs, the results cache, sweeps that resume and survive a diverging run."""
import json

import pytest

from fedcompanion.experiments import ExperimentConfig, is_cached, load_params, sweep
from fedcompanion.validation import ConfigError


def _cfg(**kw):
    base = dict(task="least_squares", task_args=dict(num_clients=4, dim=3), algorithm="fedavg",
                rounds=3, clients_per_round=2, lr=0.05, local=dict(steps=2, batch_size=None))
    return ExperimentConfig(**(base | kw))


def test_hash_is_stable_and_ignores_label():
    assert _cfg().hash() == _cfg(label="other name").hash()
    assert _cfg().hash() != _cfg(seed=1).hash()
    assert _cfg().hash() != _cfg(hyperparameters={"server_lr": 0.5}).hash()


def test_sweep_caches_resumes_and_records_divergence(tmp_path):
    good, bad = _cfg(label="good"), _cfg(lr=80.0, rounds=40, label="bad")
    frame = sweep([good, bad], tmp_path, jobs=1, progress=False)
    assert set(frame.status) == {"ok", "diverged"}
    meta = json.loads((tmp_path / f"{bad.hash()}.json").read_text())
    assert meta["status"] == "diverged" and meta["diverged_round"] >= 1
    assert not list(tmp_path.glob("*.tmp")), "writes are atomic: no temp files remain"
    # a second sweep reads the cache: the stored files are not rewritten
    stamp = (tmp_path / f"{good.hash()}.csv.gz").stat().st_mtime_ns
    extra = _cfg(seed=5)
    again = sweep([good, bad, extra], tmp_path, jobs=1, progress=False)
    assert (tmp_path / f"{good.hash()}.csv.gz").stat().st_mtime_ns == stamp
    assert is_cached(extra, tmp_path) and set(again.label) == {"good", "bad", "fedavg"}
    with_model = _cfg(save_params=True)
    sweep([with_model], tmp_path, jobs=1, progress=False)
    assert load_params(with_model, tmp_path).shape == (3,)


def test_sweep_in_parallel_processes_matches_serial(tmp_path):
    configs = [_cfg(seed=s) for s in range(2)]
    serial = sweep(configs, tmp_path / "a", jobs=1, progress=False)
    parallel = sweep(configs, tmp_path / "b", jobs=2, progress=False)
    assert serial.equals(parallel)


def test_sweep_computes_grouped_by_task_and_returns_in_the_given_order(tmp_path):
    """Runs are computed task by task (a tuning grid lists the seeds innermost: built once per seed, not once per
    run), and the frame still follows the configs as given, with the numbers of runs made one at a time."""
    from fedcompanion.experiments.sweep import by_task

    configs = [_cfg(lr=lr, seed=s, label=f"{lr}/{s}") for lr in (0.05, 0.1) for s in (0, 1)]
    assert [c.label for c in by_task(configs)] == ["0.05/0", "0.1/0", "0.05/1", "0.1/1"]
    frame = sweep(configs, tmp_path / "grouped", jobs=1, progress=False)
    assert list(frame.label.unique()) == [c.label for c in configs]
    alone = [sweep([c], tmp_path / "alone", jobs=1, progress=False) for c in configs]
    for c, one in zip(configs, alone):
        mine = frame[frame.label == c.label].reset_index(drop=True)
        assert mine.value.equals(one.value.reset_index(drop=True))


def test_bad_config_fails_before_running(tmp_path):
    with pytest.raises(ConfigError, match="unknown algorithm"):
        sweep([_cfg(), _cfg(algorithm="fedsgd")], tmp_path)
    with pytest.raises(ConfigError, match="unknown task"):
        sweep([_cfg(task="imagenet")], tmp_path)
    assert not list(tmp_path.glob("*.csv")), "nothing ran"


def test_optimum_tracking_on_convex_task(tmp_path):
    frame = sweep([_cfg(metrics=["suboptimality"], rounds=5)], tmp_path, jobs=1, progress=False)
    sub = frame[frame.metric == "suboptimality"].value
    assert (sub >= -1e-12).all() and sub.iloc[-1] < sub.iloc[0]


def test_gradient_norm_sq_is_the_squared_norm_of_the_weighted_client_gradients(lsq_sized):
    """||grad F||^2 with F = sum_i w_i f_i, f_i = ||A_i x - b_i||^2 / (2 n_i) + (mu / 2)||x||^2: the closed form
    grad F = sum_i w_i (A_i^T (A_i x - b_i) / n_i + mu x), against the metric's one autograd pass."""
    import torch

    from fedcompanion.experiments.stationarity import gradient_norm_sq
    from fedcompanion.tasks import from_client_arrays

    clients = [(lsq_sized.client_data(i)[0].numpy(), lsq_sized.client_data(i)[1].numpy()) for i in range(4)]
    task = from_client_arrays("lsq-l2", clients, torch.nn.Sequential(torch.nn.Flatten(),
                              torch.nn.Linear(4, 1, bias=False)), "squared", weights="size", l2=0.3,
                              dtype=torch.float64)
    x = torch.tensor([0.5, -1.0, 2.0, 0.25], dtype=torch.float64)
    grad = sum(float(task.weights[i]) * (a.T @ (a @ x - b) / len(b) + 0.3 * x)
               for i, (a, b) in enumerate(task.client_data(i) for i in range(4)))
    assert gradient_norm_sq(task, None)(x) == pytest.approx(float(grad @ grad), rel=1e-13)


def test_rounds_to_a_target_counts_the_first_round_after_the_start():
    from fedcompanion.experiments import rounds_to

    rounds, accuracy = [20, 0, 10, 30], [0.8, 0.9, 0.5, 0.95]  # out of order; the start already above the target
    assert rounds_to(rounds, accuracy, 0.8) == 20.0       # not 0 (the start), not 30 (later)
    assert rounds_to(rounds, accuracy, 0.99) != rounds_to(rounds, accuracy, 0.99)  # NaN: never reached
    assert rounds_to([0, 5, 10], [1.0, 0.2, 0.04], 0.05, "lower") == 10.0   # strictly below, where lower is better
    assert rounds_to([0, 5, 10], [1.0, 0.05, 0.04], 0.05, "lower") == 10.0
