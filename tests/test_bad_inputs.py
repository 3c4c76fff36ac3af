"""Bad input fails early, with the right error type and a message that names the parameter.

One table: each row is (what is wrong, a call that must fail, the error type, a pattern the message must
contain). The first block are the cases found by the new-user review; the rest cover every public entry point.
"""
import dataclasses

import numpy as np
import pytest
import torch

import fedcompanion as fc
from fedcompanion.data import DataError
from fedcompanion.experiments import ExperimentConfig, Spec, log_grid, sweep, tune
from fedcompanion.reproduction import arena
from fedcompanion.reproduction.rule import claim as decision
from fedcompanion.reproduction.rule import item as verdict
from fedcompanion.validation import ConfigError


@pytest.fixture(scope="module")
def lsq4():
    return fc.tasks.least_squares_task(num_clients=4, dim=3, seed=0)


def _run(task, **kw):
    args = dict(rounds=2, clients_per_round=2, local=fc.LocalWork(steps=1)) | kw
    algorithm = args.pop("algorithm", fc.make("fedavg"))
    return fc.run(task, algorithm, **args)


def _cfg(**kw):
    base = dict(task="least_squares", task_args=dict(num_clients=4, dim=3), algorithm="fedavg", rounds=2,
                clients_per_round=2, local=dict(steps=1, batch_size=None))
    return ExperimentConfig(**(base | kw)).validate()


def _lsq_clients(n=3):
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(5, 2)), rng.normal(size=5)) for _ in range(n)]


LINEAR = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 1, bias=False))

CASES = [
    # ---- found by the review: silently wrong before
    ("init of the wrong length", lambda t: _run(t, init=torch.zeros(7)), ConfigError, "init must have shape"),
    ("sampling callable returning NaN", lambda t: _run(t, sampling=lambda r: np.full(4, np.nan)), ConfigError,
     "sampling probabilities"),
    ("LocalWork(epochs=inf)", lambda t: fc.LocalWork(epochs=float("inf")), ConfigError, "local epochs"),
    ("features and labels of unequal length",
     lambda t: fc.tasks.from_client_arrays("x", [(np.zeros((5, 2)), np.zeros(4))], LINEAR, "squared"),
     ConfigError, "client 0 has 5 feature rows but 4 targets"),
    ("fractional labels for cross-entropy",
     lambda t: fc.tasks.from_client_arrays("x", [(np.zeros((2, 2)), np.array([0.5, 1.0]))], LINEAR, "cross_entropy"),
     ConfigError, "integer class labels"),
    ("misspelled partitioner keyword",
     lambda t: fc.data.partition(np.arange(100) % 10, 5, "dirichlet", np.random.default_rng(0), alpa=0.1),
     ConfigError, r"no parameter \['alpa'\]"),
    ("a str algorithm", lambda t: fc.run(t, "fedavg", rounds=1), ConfigError, r"algorithm must be .*fc.make"),
    ("a dict for local", lambda t: _run(t, local={"steps": 1}), ConfigError, "local must be a fc.LocalWork"),
    ("numpy init", lambda t: _run(t, init=np.zeros(3)), ConfigError, "init must be a torch tensor"),
    ("a list for extra_metrics", lambda t: _run(t, extra_metrics=[len]), ConfigError, "extra_metrics must be"),
    ("gamma list of the wrong length", lambda t: _run(t, algorithm=fc.make("fedvra", gamma=[0.1, 0.2, 0.3])),
     ConfigError, "gamma has 3 values but the task has 4 clients"),
    ("CEADMM sigma checked when made", lambda t: fc.make("ceadmm", sigma=-1.0), ConfigError, "sigma must be > 0"),
    ("sigma and gamma together", lambda t: fc.make("admm", sigma=1.0, gamma=0.1), ConfigError, "sigma or gamma"),
    ("inf as a hyperparameter", lambda t: fc.make("fedprox", mu=float("inf")), ConfigError, "mu must be a finite"),
    ("sweep: unknown task_args", lambda t: _cfg(task_args=dict(num_clients=4, dimm=3)), ConfigError,
     r"no argument \['dimm'\]"),
    ("sweep: unknown sampling", lambda t: _cfg(sampling="random"), ConfigError, "unknown sampling 'random'"),
    ("sweep: ADMM family on an MLP task", lambda t: _cfg(task="dataset", task_args={}, algorithm="ceadmm"),
     ConfigError, "needs a linear model with a least-squares or logistic loss"),
    ("sweep: eval_every 0", lambda t: _cfg(eval_every=0), ConfigError, "eval_every must be >= 1"),
    # ---- fc.run
    ("rounds 0", lambda t: _run(t, rounds=0), ConfigError, "rounds must be >= 1"),
    ("rounds fractional", lambda t: _run(t, rounds=1.5), ConfigError, "rounds must be an integer"),
    ("lr NaN", lambda t: _run(t, lr=float("nan")), ConfigError, "lr must be a finite"),
    ("lr a str", lambda t: _run(t, lr="0.1"), ConfigError, "lr must be a number"),
    ("seed negative", lambda t: _run(t, seed=-1), ConfigError, "seed must be >= 0"),
    ("eval_every 0", lambda t: _run(t, eval_every=0), ConfigError, "eval_every must be >= 1"),
    ("clients_per_round above N", lambda t: _run(t, clients_per_round=9), ConfigError, "clients_per_round must be"),
    ("unknown engine", lambda t: _run(t, engine="gpu"), ConfigError, "unknown engine 'gpu'"),
    ("divergence_factor below 1", lambda t: _run(t, divergence_factor=0.5), ConfigError, "divergence_factor"),
    ("not a task", lambda t: fc.run({"x": 1}, fc.make("fedavg"), rounds=1), ConfigError, "task must be"),
    ("not an algorithm", lambda t: fc.run(t, None, rounds=1), ConfigError, "algorithm must be"),
    ("ADMM family on a non-linear model", lambda t: fc.run(
        fc.tasks.Task("x", torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3, 3), torch.nn.Tanh(),
                                               torch.nn.Linear(3, 1)), "squared", t.x_all, t.y_all, t.offsets,
                      t.weights, dtype=torch.float64), fc.make("ceadmm"), rounds=1),
     ConfigError, "ceadmm needs a linear model"),
    ("init with NaN", lambda t: _run(t, init=torch.full((3,), float("nan"), dtype=torch.float64)), ConfigError,
     "init must hold finite"),
    ("unknown device", lambda t: _run(t, device="tpu"), ConfigError, "device must be"),
    ("probabilities outside [0, 1]", lambda t: _run(t, sampling=lambda r: np.full(4, 1.5)), ConfigError,
     "sampling probabilities"),
    # ---- LocalWork
    ("local steps 0", lambda t: fc.LocalWork(steps=0), ConfigError, "local steps must be >= 1"),
    ("local steps fractional", lambda t: fc.LocalWork(steps=2.5), ConfigError, "local steps must be an integer"),
    ("two amounts of work", lambda t: fc.LocalWork(steps=2, epochs=1.0), ConfigError, "give exactly one of"),
    ("steps_range reversed", lambda t: fc.LocalWork(steps_range=(5, 2)), ConfigError, "steps_range high"),
    ("steps_range not a pair", lambda t: fc.LocalWork(steps_range=3), ConfigError, "steps_range must be a pair"),
    ("batch_size 0", lambda t: fc.LocalWork(steps=1, batch_size=0), ConfigError, "batch_size must be >= 1"),
    ("momentum 1", lambda t: fc.LocalWork(steps=1, momentum=1.0), ConfigError, "momentum must be"),
    ("weight decay negative", lambda t: fc.LocalWork(steps=1, weight_decay=-1.0), ConfigError, "weight_decay"),
    ("momentum_reset not a bool", lambda t: fc.LocalWork(steps=1, momentum_reset="no"), ConfigError,
     "momentum_reset must be"),
    # ---- make
    ("unknown algorithm", lambda t: fc.make("fedavgg"), ConfigError, "unknown algorithm 'fedavgg'"),
    ("algorithm name not a str", lambda t: fc.make(1), ConfigError, "algorithm must be a name"),
    ("unknown hyperparameter", lambda t: fc.make("fedprox", m=0.1), ConfigError, r"no hyperparameter \['m'\]"),
    ("gamma 0", lambda t: fc.make("fedvra", gamma=0.0), ConfigError, "gamma must be > 0"),
    ("gamma empty list", lambda t: fc.make("fedvra", gamma=[]), ConfigError, "gamma must be a number or"),
    ("dual stepsize negative", lambda t: fc.make("fedvra", dual_stepsize=-1.0), ConfigError, "dual_stepsize"),
    ("unknown server_update", lambda t: fc.make("fedvra", server_update="both"), ConfigError,
     "unknown server_update 'both'"),
    ("unknown SCAFFOLD option", lambda t: fc.make("scaffold", option="III"), ConfigError, "unknown option 'III'"),
    ("betas not a pair", lambda t: fc.make("fedadam", betas=(0.9,)), ConfigError, "betas must be a pair"),
    ("beta above 1", lambda t: fc.make("fedadam", betas=(1.5, 0.9)), ConfigError, r"betas\[0\] must be"),
    ("tau 0", lambda t: fc.make("fedyogi", tau=0.0), ConfigError, "tau must be > 0"),
    ("epsilon above 1", lambda t: fc.make("fedmgda+", epsilon=2.0), ConfigError, "epsilon must be"),
    ("q negative", lambda t: fc.make("qfedavg", q=-1.0), ConfigError, "q must be >= 0"),
    ("unknown weighting", lambda t: fc.make("adafedadam", weighting="fair"), ConfigError, "unknown weighting"),
    ("warmup negative", lambda t: fc.make("adafedadam", warmup_steps=-1), ConfigError, "warmup_steps must be"),
    ("alpha negative", lambda t: fc.make("adafedadam", alpha=-1.0), ConfigError, "alpha must be >= 0"),
    ("accumulate 0", lambda t: fc.make("naccadam", accumulate=0), ConfigError, "accumulate must be >= 1"),
    ("two_block inside two_block", lambda t: fc.make("two_block", inner="two_block"), ConfigError,
     "cannot be two_block"),
    ("two_block over an ADMM solver", lambda t: fc.make("two_block", inner="ceadmm"), ConfigError,
     "must run on the SGD engine"),
    ("k0 0", lambda t: fc.make("iceadmm", k0=0), ConfigError, "k0 must be >= 1"),
    ("unknown curvature", lambda t: fc.make("iceadmm", curvature="hessian"), ConfigError, "unknown curvature"),
    ("two_block on a non-clustering task", lambda t: _run(t, algorithm=fc.make("two_block")), ConfigError,
     "clustering or semi-supervised task"),
    # ---- tasks and data
    ("unknown dataset", lambda t: fc.tasks.federated_dataset_task("mnsit"), ConfigError, "unknown dataset 'mnsit'"),
    ("unknown partition scheme", lambda t: fc.tasks.federated_dataset_task("mnist", 10, "pathological"),
     ConfigError, "unknown partition 'pathological'"),
    ("local test fraction above 0.9", lambda t: fc.tasks.federated_dataset_task(local_test_fraction=1.5),
     ConfigError, "local_test_fraction"),
    ("unknown model", lambda t: fc.tasks.federated_dataset_task("mnist", 10, model="resnet"), ConfigError,
     "unknown model 'resnet'"),
    ("a client without data", lambda t: fc.tasks.from_client_arrays("x", [(np.zeros((0, 2)), np.zeros(0))], LINEAR,
                                                                   "squared"), ConfigError, "client 0 holds no data"),
    ("model not a module", lambda t: fc.tasks.from_client_arrays("x", _lsq_clients(), "linear", "squared"),
     ConfigError, "model must be a torch.nn.Module"),
    ("task name not a string", lambda t: fc.tasks.from_client_arrays(3, _lsq_clients(), LINEAR, "squared"),
     ConfigError, "name must be a string"),
    ("negative noise", lambda t: fc.tasks.least_squares_task(num_clients=4, dim=3, noise=-1.0), ConfigError,
     "noise"),
    ("negative non-convex weight", lambda t: fc.tasks.qsar_logistic_task(num_clients=4, nonconvex=-0.1),
     ConfigError, "nonconvex"),
    ("a non-convex task on an engine", lambda t: fc.run(dataclasses.replace(t, nonconvex=1.0), fc.make("fedavg"), 1),
     ConfigError, "engines do not train the non-convex regulariser"),
    ("logistic label 2",
     lambda t: fc.tasks.from_client_arrays("x", [(np.zeros((2, 2)), np.array([0.0, 2.0]))], LINEAR, "logistic"),
     ConfigError, "logistic labels must be 0 or 1"),
    ("NaN targets", lambda t: fc.tasks.from_client_arrays("x", [(np.zeros((2, 2)), np.array([0.0, np.nan]))],
                                                         LINEAR, "squared"), ConfigError, "NaN or inf"),
    ("unknown weights", lambda t: fc.tasks.from_client_arrays("x", _lsq_clients(), LINEAR, "squared",
                                                             weights="equal"), ConfigError, "unknown weights"),
    ("unknown loss", lambda t: fc.tasks.from_client_arrays("x", _lsq_clients(), LINEAR, "hinge"), ConfigError,
     "unknown loss 'hinge'"),
    ("unknown QSAR setting", lambda t: fc.tasks.qsar_logistic_task(setting="theirs"), ConfigError,
     "unknown setting 'theirs'"),
    ("test fraction above 1", lambda t: fc.data.load_dataset("qsar", test_fraction=2.0), ConfigError,
     "test_fraction must be"),
    ("dirichlet alpha 0", lambda t: fc.data.partition(np.arange(50) % 5, 5, "dirichlet", np.random.default_rng(0),
                                                      alpha=0.0), ConfigError, "alpha must be > 0"),
    ("shards 0 per client", lambda t: fc.data.partition(np.arange(50) % 5, 5, "shards", np.random.default_rng(0),
                                                        shards_per_client=0), ConfigError, "shards_per_client"),
    ("quantity beta negative", lambda t: fc.data.partition(np.arange(50), 5, "quantity", np.random.default_rng(0),
                                                           beta=-1.0), ConfigError, "beta must be > 0"),
    ("more clients than samples", lambda t: fc.data.partition(np.arange(5), 10, "iid", np.random.default_rng(0)),
     ConfigError, "num_clients=10 is too many"),
    ("task weights not summing to 1",
     lambda t: fc.tasks.Task("x", LINEAR, "squared", t.x_all, t.y_all, t.offsets, t.weights * 2), ConfigError,
     "client weights must be"),
    ("a task on an unknown device", lambda t: t.to("tpu"), ConfigError, "device must be"),
    # ---- the ADMM family on fc.run
    ("rounds 0", lambda t: fc.run(t, fc.make("iceadmm"), 0), ConfigError, "rounds must be >= 1"),
    ("eval_every 0", lambda t: fc.run(t, fc.make("iceadmm"), 5, eval_every=0), ConfigError, "eval_every must be"),
    ("tol negative", lambda t: fc.run(t, fc.make("iceadmm"), 5, tol=-1.0), ConfigError, "tol must be > 0"),
    ("init of the wrong shape", lambda t: fc.run(t, fc.make("iceadmm"), 5, init=torch.zeros(5)), ConfigError,
     r"init must have shape \(3,\)"),
    ("sigma list of the wrong length", lambda t: fc.run(t, fc.make("ceadmm", sigma=[1.0, 2.0]), 1),
     ConfigError, "sigma has 2 values but the task has 4 clients"),
    ("sampling for the ADMM family", lambda t: fc.run(t, fc.make("ceadmm"), 1, clients_per_round=2), ConfigError,
     "ceadmm needs every client in every round"),
    ("tol for an engine algorithm", lambda t: fc.run(t, fc.make("fedavg"), 1, tol=1e-8), ConfigError,
     "tol stops a run on"),
    # ---- configs and sweeps
    ("unknown task", lambda t: _cfg(task="imagenet"), ConfigError, "unknown task 'imagenet'"),
    ("task_args not a dict", lambda t: _cfg(task_args=[4, 3]), ConfigError, "task_args must be a dict"),
    ("hyperparameters not a dict", lambda t: _cfg(hyperparameters=[1]), ConfigError,
     "hyperparameters must be a dict"),
    ("unknown metric", lambda t: _cfg(metrics=["accuracy"]), ConfigError, "unknown metric 'accuracy'"),
    ("tol for an engine algorithm", lambda t: _cfg(tol=1e-3), ConfigError, "tol stops a run on"),
    ("weighted sampling for the ADMM family in a config",
     lambda t: _cfg(algorithm="ceadmm", clients_per_round=None, sampling="weighted"), ConfigError,
     "ceadmm needs every client in every round"),
    ("per_client_metrics not a bool", lambda t: _cfg(per_client_metrics="yes"), ConfigError,
     "per_client_metrics must be"),
    ("config device unknown", lambda t: _cfg(device="tpu"), ConfigError, "device must be"),
    ("misspelled LocalWork field", lambda t: _cfg(local={"stepz": 3}), ConfigError, r"local has no field \['stepz'\]"),
    ("partition keyword of another scheme",
     lambda t: _cfg(task="dataset", task_args={"partition_scheme": "iid", "alpha": 0.1}), ConfigError,
     r"no argument \['alpha'\]; its arguments and the 'iid' partition's are"),
    ("sweep of something else", lambda t: sweep([{"task": "dataset"}], "build/never"), ConfigError,
     "configs must be a list of ExperimentConfig"),
    ("sweep jobs 0", lambda t: sweep([], "build/never", jobs=0), ConfigError, "jobs must be >= 1"),
    # ---- second pass: the arena, tuning, verdicts, configs, each algorithm's own checks, kernels, builders, notebooks
    # arena
    ("arena: tuning seeds overlap evaluation seeds",
     lambda t: arena.run_arena(["qsar"], ["FedAvg"], arena.Plan(seeds=(0, 1), tune_seeds=(0, 5)), "build/never"),
     ConfigError, r"tuning seeds \[0, 5\] overlap the evaluation seeds \[0, 1\] at \[0\]"),
    ("arena plan: one evaluation seed", lambda t: arena.Plan(seeds=(0,)), ConfigError,
     "arena plan seeds needs at least 2 seeds"),
    ("arena plan: rounds 0", lambda t: arena.Plan(rounds=0), ConfigError, "rounds"),
    ("arena plan: rungs 0", lambda t: arena.Plan(rungs=0), ConfigError, "rungs"),
    ("arena plan: points 1", lambda t: arena.Plan(points=1), ConfigError, "points"),
    ("arena plan: decades 0", lambda t: arena.Plan(decades=0.0), ConfigError, "decades"),
    ("arena plan: clients_per_round 0", lambda t: arena.Plan(clients_per_round=0), ConfigError, "clients_per_round"),
    ("arena plan: local_steps 0", lambda t: arena.Plan(local_steps=0), ConfigError, "local_steps"),
    ("arena: no methods", lambda t: arena.check_names(["qsar"], []), ConfigError, "none given"),
    ("arena: no tasks", lambda t: arena.check_names([], ["FedAvg"]), ConfigError, "none given"),
    ("arena contender: unknown algorithm",
     lambda t: arena.run_arena(["qsar"], ["X"], arena.Plan(), "build/never",
         contenders={"X": arena.Contender("fedsgd", {"lr": 1.0})}),
     ConfigError, "fedsgd"),
    # tuning
    ("log_grid centre 0", lambda t: log_grid(0.0), ConfigError, "centre > 0"),
    ("log_grid one point", lambda t: log_grid(1.0, points=1), ConfigError, "points >= 2"),
    ("log_grid decades negative", lambda t: log_grid(1.0, decades=-1), ConfigError, "decades > 0"),
    ("tune with one seed", lambda t: tune({"a": None}, [0], None, "build/never", evaluation_seeds=[9]), ConfigError,
     "at least 2 seeds"),
    ("tune: default outside its grid",
     lambda t: tune({"a": Spec(lambda s, seed: _cfg(seed=seed), {"lr": [0.1, 0.2]}, {"lr": 0.5})}, [0, 1], None,
         "build/never", evaluation_seeds=[9]),
     ConfigError, "not in its grid"),
    ("tune: extend negative", lambda t: tune({"a": None}, [0, 1], None, "build/never", evaluation_seeds=[9], extend=-1),
     ConfigError, "extend"),
    ("tune: margin negative", lambda t: tune({"a": None}, [0, 1], None, "build/never", evaluation_seeds=[9],
                                                   margin=-0.1),
     ConfigError, "margin"),
    ("tune: nothing to tune", lambda t: tune({}, [0, 1], None, "build/never", evaluation_seeds=[9]), ConfigError,
     "at least one method"),
    # verdict
    ("paired: unequal lengths", lambda t: verdict.paired("s", "q", "m", "higher", [1, 2], [1], [0, 1]).word(),
     ValueError, "values"),
    ("paired: unknown direction", lambda t: verdict.paired("s", "q", "m", "up", [1, 2], [1, 2], [0, 1]),
     ValueError, "better"),
    ("identity: negative tolerance", lambda t: verdict.identity("s", "q", 0.0, -1.0), ValueError, "tolerance"),
    ("decide: no evidence", lambda t: decision.decide([]), ValueError, "evidence"),
    ("paired: holds_if unknown",
     lambda t: verdict.paired("s", "q", "m", "higher", [1, 2], [1, 2], [0, 1], holds_if="maybe"),
     ValueError, "holds_if"),
    # config
    ("config: rounds negative", lambda t: _cfg(rounds=-1), ConfigError, "rounds"),
    ("config: lr inf", lambda t: _cfg(lr=float("inf")), ConfigError, "lr"),
    ("config: local not a dict", lambda t: _cfg(local=[1]), ConfigError, "local"),
    ("config: metrics not a list", lambda t: _cfg(metrics="suboptimality"), ConfigError, "metrics"),
    ("config: eval_train not a bool", lambda t: _cfg(eval_train="yes"), ConfigError, "eval_train"),
    ("config: save_params not a bool", lambda t: _cfg(save_params=1), ConfigError, "save_params"),
    ("config: clients_per_round 0", lambda t: _cfg(clients_per_round=0), ConfigError, "clients_per_round"),
    ("config: seed a float", lambda t: _cfg(seed=1.5), ConfigError, "seed"),
    ("config: divergence_factor 0.5", lambda t: _cfg(divergence_factor=0.5), ConfigError, "divergence_factor"),
    ("config: unknown engine", lambda t: _cfg(engine="gpu"), ConfigError, "engine"),
    ("config: engine kernel misspelled", lambda t: _cfg(engine="batched-product"), ConfigError, "engine"),
    ("config: algorithm not a str", lambda t: _cfg(algorithm=3), ConfigError, "algorithm"),
    ("config: label not a str", lambda t: _cfg(label=3), ConfigError, "label"),
    # algorithms
    ("fedavgm momentum 1", lambda t: fc.make("fedavgm", momentum=1.0), ConfigError, "momentum"),
    ("fedprox mu negative", lambda t: fc.make("fedprox", mu=-0.1), ConfigError, "mu"),
    ("feddyn alpha 0", lambda t: fc.make("feddyn", alpha=0.0), ConfigError, "alpha"),
    ("fedadmm gamma negative", lambda t: fc.make("fedadmm", gamma=-1.0), ConfigError, "gamma"),
    ("qfedavg q a str", lambda t: fc.make("qfedavg", q="1"), ConfigError, "q"),
    ("fedmgda epsilon negative", lambda t: fc.make("fedmgda+", epsilon=-0.1), ConfigError, "epsilon"),
    ("fednova server_lr 0", lambda t: fc.make("fednova", server_lr=0.0), ConfigError, "server_lr"),
    ("fedyogi tau negative", lambda t: fc.make("fedyogi", tau=-1e-3), ConfigError, "tau"),
    ("adafedadam normalise not a bool", lambda t: fc.make("adafedadam", normalise=1), ConfigError, "normalise"),
    ("adafedadam certainty not a bool", lambda t: fc.make("adafedadam", certainty="off"), ConfigError, "certainty"),
    ("adafedadam probe_samples 0", lambda t: fc.make("adafedadam", probe_samples=0), ConfigError, "probe_samples"),
    ("fedvra aggregation stepsize a word", lambda t: fc.make("fedvra", aggregation_stepsize="probability"),
     ConfigError, "aggregation_stepsize"),
    ("fedavg server_lr negative", lambda t: fc.make("fedavg", server_lr=-1.0), ConfigError, "server_lr"),
    ("ceadmm local_solver unknown", lambda t: fc.make("ceadmm", local_solver="lu"), ConfigError, "local_solver"),
    ("iceadmm gram_r 0", lambda t: fc.make("iceadmm", gram_r=0.0), ConfigError, "gram_r"),
    # engines
    ("batched kernel unknown", lambda t: fc.run(t, fc.make("fedavg"), 1, engine="batched-fused"),
     ConfigError, "engine"),
    ("products kernel on least squares with per-client lr",
     lambda t: fc.engine.train_batched(t, None, [0], seed=0, round=0, batch_size=None, kernel="fast"),
     ConfigError, "kernel"),
    # task builders
    ("dataset task: 0 clients", lambda t: fc.tasks.federated_dataset_task("mnist", 0), ConfigError, "num_clients"),
    ("least squares: dim 0", lambda t: fc.tasks.least_squares_task(num_clients=4, dim=0), ConfigError, "dim"),
    ("clustering: 0 clusters", lambda t: fc.tasks.clustering_task(num_clusters=0), ConfigError, "num_clusters"),
    ("from arrays: l2 negative", lambda t: fc.tasks.from_client_arrays("x", _lsq_clients(), LINEAR, "squared", l2=-0.1),
     ConfigError, "l2"),
    ("from arrays: client_test count",
     lambda t: fc.tasks.from_client_arrays("x", _lsq_clients(3), LINEAR, "squared", client_test=_lsq_clients(2)),
     ConfigError, "client_test has 2 clients"),
    ("from arrays: a client not a pair",
     lambda t: fc.tasks.from_client_arrays("x", [np.zeros((2, 2))], LINEAR, "squared"),
     ConfigError, "pair"),
    ("from arrays: features a str",
     lambda t: fc.tasks.from_client_arrays("x", [("abc", np.zeros(2))], LINEAR, "squared"),
     ConfigError, "features"),
    ("task.to an unknown device", lambda t: t.to("tpu"), ConfigError, "device"),
    # notebooks
    ("notebook: smoke names an undefined parameter",
     lambda t: fc.notebook.parameters({"profile": "paper"}, dict(rounds=3)),
     ConfigError, "rounds"),
    ("notebook: unknown profile", lambda t: fc.notebook.parameters({"profile": "fast", "rounds": 3}, dict(rounds=3)),
     ConfigError, "profile"),
]


@pytest.mark.parametrize("what,call,error,pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_named(lsq4, what, call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(lsq4)


def test_the_table_is_large():
    assert len(CASES) >= 98 + 60  # the first pass's 98, and at least 60 more


def test_a_huge_loss_is_divergence_not_ok(lsq4):
    """The loss grows by orders of magnitude without overflowing: the run stops as diverged."""
    r = _run(lsq4, lr=3.0, rounds=60, local=fc.LocalWork(steps=2, batch_size=None))
    assert r.status == "diverged" and r.metric("train_loss").iloc[-1] > 1e3 * r.metric("train_loss").iloc[0]
    assert np.isfinite(r.metric("train_loss").iloc[-1]), "caught before it overflowed"
    unguarded = _run(lsq4, lr=3.0, rounds=60, local=fc.LocalWork(steps=2, batch_size=None), divergence_factor=None)
    assert unguarded.rounds_run > r.rounds_run


def test_reproduce_only_matching_nothing_fails():
    from fedcompanion.reproduction.reproduce import main

    assert main(["--only", "no-such-notebook"]) != 0


def test_reproduce_parallel_must_be_positive(capsys):
    from fedcompanion.reproduction.reproduce import main

    assert main(["--parallel", "0"]) == 2
    assert "--parallel must be >= 1" in capsys.readouterr().err


def test_reproduce_schedules_the_longest_notebooks_first():
    from fedcompanion.reproduction.reproduce import ROOT, longest_first

    nbs = [ROOT / "notebooks" / name for name in ("00_tour.ipynb", "fedvra/03_x.ipynb", "new.ipynb", "a/b.ipynb")]
    previous = {"00_tour": 120.0, "fedvra/03_x": 240.0, "a/b": 15.0}
    order = [nb.relative_to(ROOT / "notebooks").as_posix() for nb in longest_first(nbs, previous)]
    assert order == ["new.ipynb", "fedvra/03_x.ipynb", "00_tour.ipynb", "a/b.ipynb"]  # unknown time: first


def test_reproduce_shares_the_cores_between_kernels():
    from fedcompanion.reproduction.reproduce import kernel_threads

    assert kernel_threads(1, 2) is None  # one at a time: the libraries' defaults
    assert (kernel_threads(2, 2), kernel_threads(2, 16), kernel_threads(4, 2)) == (1, 8, 1)


def test_reproduce_gives_each_notebook_its_share_of_sweep_processes():
    from fedcompanion.reproduction.reproduce import sweep_jobs

    assert (sweep_jobs(1, 2), sweep_jobs(2, 2), sweep_jobs(4, 16), sweep_jobs(4, 2)) == (2, 1, 4, 1)


def test_reproduce_default_runs_a_notebook_per_core_on_small_machines_and_per_two_cores_on_larger():
    from fedcompanion.reproduction.reproduce import default_parallel

    assert [default_parallel(c) for c in (1, 2, 3, 4, 16)] == [1, 2, 3, 2, 8]


def test_reproduce_passes_jobs_only_to_the_notebooks_that_declare_it():
    from fedcompanion.reproduction.reproduce import ROOT, declared_parameters, notebook_parameters, notebooks

    declaring = {nb.relative_to(ROOT / "notebooks").as_posix() for nb in notebooks()
                 if "jobs" in declared_parameters(nb)}
    assert {"00_tour.ipynb", "adafedadam/03_adafedadam.ipynb", "fedvra/04_against_baselines.ipynb"} <= declaring
    assert "90_scale_out_with_flower.ipynb" not in declaring
    for nb in notebooks():  # a notebook whose sweeps take their process count from a parameter declares it
        if "jobs=P.jobs" in nb.read_text():
            assert "jobs" in declared_parameters(nb), nb
    params = {"profile": "paper", "refresh": False}
    assert notebook_parameters(ROOT / "notebooks" / "00_tour.ipynb", params, 1) == params | {"jobs": 1}
    assert notebook_parameters(ROOT / "notebooks" / "90_scale_out_with_flower.ipynb", params, 1) == params


def test_data_errors_name_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCOMPANION_DATA", str(tmp_path))
    with pytest.raises(DataError, match="SHA256SUMS is missing"):
        fc.data.load_dataset("qsar")
