"""fc.run's arguments, checked once: each number's rule is declared once (``validation.ARGUMENTS``) and read by
``fc.run`` and by ``ExperimentConfig`` alike; the engine is checked for every algorithm, the ADMM family included
(it used to run ``fc.run(task, fc.make("ceadmm"), 3, engine="nonexistent", lr=123)`` silently); what an algorithm
declares it needs (every client in every round, a stationarity for ``tol``) is refused with the reason."""
import pytest
import torch

import fedcompanion as fc
from fedcompanion.algorithms.base import REGISTRY
from fedcompanion.experiments import ExperimentConfig
from fedcompanion.validation import ARGUMENTS, ConfigError

ARGS = dict(num_clients=4, dim=3)
BAD = {"rounds": 0, "seed": -1, "eval_every": 0, "divergence_factor": 0.5, "lr": 0.0, "tol": -1.0, "threads": 0,
       "clients_per_round": 0}


@pytest.fixture(scope="module")
def lsq():
    return fc.tasks.least_squares_task(seed=0, **ARGS)


def test_every_declared_rule_is_tried_here():
    assert set(BAD) == set(ARGUMENTS)


@pytest.mark.parametrize("name", sorted(set(BAD) - {"threads"}))  # a config has no threads: a sweep fixes them
def test_a_bad_value_gets_the_same_message_from_fc_run_and_from_a_config(lsq, name):
    algorithm = "ceadmm" if name == "tol" else "fedavg"  # tol is the ADMM family's
    with pytest.raises(ConfigError) as from_run:
        fc.run(lsq, fc.make(algorithm), **{"rounds": 2, name: BAD[name]})
    with pytest.raises(ConfigError) as from_config:
        ExperimentConfig(task="least_squares", task_args=ARGS, algorithm=algorithm, **{name: BAD[name]}).validate()
    if name == "clients_per_round":  # fc.run knows the task, and says its upper bound too
        assert str(from_run.value) == "clients_per_round must be >= 1 and <= 4, got 0"
        assert str(from_config.value) == "clients_per_round must be >= 1, got 0"
    else:
        assert str(from_run.value) == str(from_config.value) and name in str(from_run.value)


def test_a_config_asking_for_more_clients_than_its_task_has_gets_fc_runs_message():
    config = ExperimentConfig(task="least_squares", task_args=ARGS, clients_per_round=9, rounds=1)
    with pytest.raises(ConfigError, match=r"clients_per_round must be >= 1 and <= 4, got 9"):
        fc.experiments.run_config(config)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_an_unknown_engine_is_refused_for_every_algorithm(lsq, name):
    with pytest.raises(ConfigError, match="unknown engine 'nonexistent'"):
        fc.run(lsq, fc.make(name), 1, engine="nonexistent")


@pytest.mark.parametrize("argument", [{"clients_per_round": 2}, {"sampling": "weighted"}])
def test_the_admm_family_refuses_partial_participation_with_the_reason(lsq, argument):
    with pytest.raises(ConfigError, match="ceadmm needs every client in every round"):
        fc.run(lsq, fc.make("ceadmm"), 2, **argument)
    with pytest.raises(ConfigError, match="iceadmm needs every client in every round"):
        ExperimentConfig(task="least_squares", task_args=ARGS, algorithm="iceadmm", clients_per_round=2).validate()


def test_tol_is_refused_for_an_algorithm_that_reports_no_stationarity(lsq):
    with pytest.raises(ConfigError, match="fedavg's rounds do not report"):
        fc.run(lsq, fc.make("fedavg"), 2, tol=1e-9)


@pytest.mark.parametrize("name", ["ceadmm", "iceadmm", "liadmm"])
def test_the_admm_family_gives_the_same_numbers_on_every_engine_whatever_its_lr_and_local_work(lsq, name):
    """Its local objectives declare an exact (or linearised) solve, which the exact kernel does for every engine: the
    engine, the client step size and the local work do not change a bit of the run."""
    hyperparameters = {} if name == "liadmm" else {"k0": 2}  # (LIADMM communicates every iteration)
    base = fc.run(lsq, fc.make(name, **hyperparameters), 12)
    for kwargs in ({"engine": "loop"}, {"engine": "batched-products", "lr": 123.0, "local": fc.LocalWork(steps=7)}):
        other = fc.run(lsq, fc.make(name, **hyperparameters), 12, **kwargs)
        assert torch.equal(base.params, other.params)
        assert base.history.equals(other.history)


def test_the_admm_family_runs_from_a_config_on_a_users_convex_task_and_refuses_another_with_the_reason(tmp_path):
    """A config used to refuse the ADMM family on every task but two names (least_squares, qsar); it now asks the
    task itself: a linear model with a least-squares or logistic loss, a user's task too."""
    from fedcompanion.experiments import sweep

    fc.register_task("my-regression", lambda seed=0: fc.tasks.least_squares_task(num_clients=4, dim=3, seed=seed))
    fc.register_task("my-network", lambda seed=0: fc.tasks.synthetic_task(num_clients=4, seed=seed, model="mlp"))
    try:
        runs = sweep([ExperimentConfig(task="my-regression", algorithm=a, rounds=20, seed=s, clients_per_round=None)
                      for a in ("ceadmm", "iceadmm") for s in (0, 1)], tmp_path, jobs=1, progress=False)
        assert sorted(runs.attrs["runs"].status) == ["ok"] * 4
        with pytest.raises(ConfigError, match="ceadmm needs a linear model with a least-squares or logistic loss"):
            ExperimentConfig(task="my-network", algorithm="ceadmm", rounds=2).validate()
    finally:
        for name in ("my-regression", "my-network"):
            fc.experiments.TASKS.pop(name)
