"""run(): determinism, sampling, communication accounting, divergence, bad input."""
import numpy as np
import pytest
import torch

import fedcompanion as fc
from fedcompanion.algorithms.base import REGISTRY
from fedcompanion.engine.sampling import make_sampler, weighted_probabilities
from fedcompanion.validation import ConfigError


def _deterministic(history):
    return history[history.metric != "compute_time"].reset_index(drop=True)


def test_same_seed_same_history_other_seed_differs(small_mnist):
    kw = dict(rounds=3, clients_per_round=5, local=fc.LocalWork(epochs=0.5, batch_size=16))
    a = fc.run(small_mnist, fc.make("fedprox", mu=0.1), seed=1, **kw)
    b = fc.run(small_mnist, fc.make("fedprox", mu=0.1), seed=1, **kw)
    c = fc.run(small_mnist, fc.make("fedprox", mu=0.1), seed=2, **kw)
    assert _deterministic(a.history).equals(_deterministic(b.history))
    assert torch.equal(a.params, b.params)
    assert not np.allclose(a.metric("train_loss").values, c.metric("train_loss").values)


def test_history_is_tidy(small_mnist):
    r = fc.run(small_mnist, fc.make("fedavg"), rounds=4, clients_per_round=3, eval_every=2,
               local=fc.LocalWork(steps=2))
    assert list(r.history.columns) == ["round", "client", "metric", "value"]
    assert r.metric("test_accuracy").index.tolist() == [0, 2, 4]
    per_client = r.history[r.history.metric == "client_accuracy"]
    assert sorted(per_client.client.unique()) == list(range(small_mnist.num_clients))


def test_communication_accounting(small_mnist):
    r = fc.run(small_mnist, fc.make("fedavg"), rounds=3, clients_per_round=4, local=fc.LocalWork(steps=1))
    p = small_mnist.num_params
    assert r.metric("uploaded_floats").tolist() == [0, 4 * p, 8 * p, 12 * p]
    assert r.metric("downloaded_floats").tolist() == [0, 4 * p, 8 * p, 12 * p]


def test_uniform_sampling_is_seeded_and_exact():
    s = make_sampler("uniform", 10, 3)
    rng1, rng2 = np.random.default_rng([5, 1]), np.random.default_rng([5, 1])
    for r in range(5):
        (a, pa), (b, _) = s.sample(r, rng1), s.sample(r, rng2)
        assert np.array_equal(a, b) and len(a) == 3 and len(set(a)) == 3
        assert np.allclose(pa, 0.3)


def test_poisson_sampling_matches_its_probabilities():
    p = np.linspace(0.05, 0.95, 8)
    s = make_sampler(lambda r: p, 8)
    rng = np.random.default_rng(0)
    hits = np.zeros(8)
    for r in range(4000):
        active, probs = s.sample(r, rng)
        hits[active] += 1
    assert np.abs(hits / 4000 - p).max() < 0.03  # 4 standard errors at most


def test_weighted_probabilities_cap_at_one_and_respread():
    """q = (100, 1, 1, 1, 1)/104, m = 3: the first client is capped at 1 and the other 2 are spread evenly."""
    p = weighted_probabilities(np.array([100.0, 1, 1, 1, 1]), 3)
    np.testing.assert_allclose(p, [1.0, 0.5, 0.5, 0.5, 0.5], rtol=0, atol=1e-12)
    np.testing.assert_allclose(weighted_probabilities(np.array([1.0, 2, 3, 4]), 2), [0.2, 0.4, 0.6, 0.8], atol=1e-15)


def test_time_varying_local_steps_are_in_range():
    work = fc.LocalWork(steps_range=(2, 5))
    q = np.stack([work.steps_for(r, np.full(50, 10), np.random.default_rng(r)) for r in range(10)])
    assert q.min() == 2 and q.max() == 5 and len(np.unique(q)) == 4


def test_divergence_is_recorded(lsq):
    r = fc.run(lsq, fc.make("fedavg"), rounds=50, lr=50.0, local=fc.LocalWork(steps=5, batch_size=None))
    assert r.status == "diverged" and 1 <= r.diverged_round < 50


@pytest.mark.parametrize("kwargs,match", [
    (dict(lr=0.0), "lr must be > 0"),
    (dict(lr=-0.1), "lr must be > 0"),
    (dict(clients_per_round=0), "clients_per_round must be >= 1 and <= 6"),
    (dict(clients_per_round=7), "clients_per_round must be >= 1 and <= 6, got 7"),
    (dict(rounds=0), "rounds must be >= 1"),
    (dict(engine="gpu"), "unknown engine 'gpu'"),
    (dict(sampling="random"), "unknown sampling 'random'"),
])
def test_bad_run_arguments_are_named(lsq, kwargs, match):
    args = dict(rounds=1, clients_per_round=2) | kwargs
    with pytest.raises(ConfigError, match=match):
        fc.run(lsq, fc.make("fedavg"), **args)


def test_bad_algorithm_input_is_named():
    with pytest.raises(ConfigError, match="unknown algorithm 'fedavgg'.*fedavg"):
        fc.make("fedavgg")
    with pytest.raises(ConfigError, match=r"fedprox has no hyperparameter \['m'\].*'mu'"):
        fc.make("fedprox", m=0.1)
    with pytest.raises(ConfigError, match="mu must be >= 0"):
        fc.make("fedprox", mu=-1.0)
    with pytest.raises(ConfigError, match="local steps must be >= 1"):
        fc.LocalWork(steps=0)
    with pytest.raises(ConfigError, match="give exactly one of"):
        fc.LocalWork(steps=2, epochs=1.0)


# every registered algorithm that samples clients (the ADMM family refuses sampling: every client in every round)
ENGINE_ALGORITHMS = sorted(name for name, cls in REGISTRY.items() if not cls.every_client and name not in REGISTRY.user)


@pytest.mark.parametrize("name", ENGINE_ALGORITHMS)
def test_rounds_without_active_clients(lsq, name):
    """Every registered engine algorithm (a new one is in the list without being named here): Poisson sampling can
    draw nobody, and the round runs with K = 0 (FedAvg-like servers keep their model; FedVRA applies its server
    formula, whose client sums are empty), as Flower's server does on a round nobody answers; the run goes on."""
    if name == "two_block":  # a private block needs its loss: MNIST clustering, 6 clients
        lsq = fc.tasks.clustering_task("mnist", num_clients=6, partition_scheme="iid", num_clusters=3, seed=0)
    never = fc.run(lsq, fc.make(name), rounds=3, sampling=lambda r: np.zeros(6), local=fc.LocalWork(steps=2))
    assert never.status == "ok" and never.metric("uploaded_floats").iloc[-1] == 0
    if name in ("fedavg", "scaffold", "fedprox"):
        assert never.metric("train_loss").nunique() == 1, "nothing changed"
    sometimes = fc.run(lsq, fc.make(name), rounds=20, sampling=lambda r: np.full(6, 0.1),
                       local=fc.LocalWork(steps=2), seed=1)
    assert sometimes.status == "ok" and np.isfinite(sometimes.params).all()
