"""Algorithms are pure state machines: runs never change the algorithm object or the task, one object can
drive interleaved runs, and each state says which part lives on the clients."""
import copy

import pytest
import torch

import fedcompanion as fc
from fedcompanion.algorithms.base import REGISTRY
from fedcompanion.driver import play_round
from fedcompanion.protocol import RoundInfo

# every registered algorithm at its defaults, the ADMM family included (two_block needs a clustering or semi-supervised
# task: its purity is tested in tests/test_two_block.py), and variants whose state differs
DEFAULTS = [(n, {}) for n in sorted(REGISTRY) if n != "two_block" and n not in REGISTRY.user]
ENGINE_ALGORITHMS = DEFAULTS + [
    ("fedprox", {"mu": 0.1}), ("fedvra", {"gamma": 0.3, "dual_stepsize": 0.7}),
    ("fedvra", {"gamma": 0.3, "server_update": "direct"}), ("fedadmm", {"gamma": 0.3}), ("feddyn", {"alpha": 0.3}),
    ("scaffold", {"option": "II"}), ("scaffold", {"option": "I"})]
IDS = [f"{n}-{h}" for n, h in ENGINE_ALGORITHMS]
WORK = fc.LocalWork(steps=3, batch_size=4)


def _full_round(task, r, lr=0.05):
    n = task.num_clients
    return RoundInfo(r, torch.arange(n), torch.ones(n, dtype=task.dtype), torch.full((n,), 3), lr, task.weights)


@pytest.mark.parametrize("name,hp", ENGINE_ALGORITHMS, ids=IDS)
def test_interleaved_runs_of_one_object_equal_fresh_runs(lsq_sized, name, hp):
    """Two runs driven by one algorithm object, round by round in turn, give exactly what two fresh
    objects' separate fc.run calls give."""
    algo = fc.make(name, **hp)
    inits = [torch.linspace(-1, 1, lsq_sized.num_params, dtype=lsq_sized.dtype) * s for s in (1.0, -0.5)]
    states = [algo.init(lsq_sized, x0) for x0 in inits]
    for r in range(4):
        for k in (0, 1):
            states[k] = play_round(lsq_sized, algo, states[k], _full_round(lsq_sized, r), engine="loop",
                                   seed=k, local=WORK)[0]
    for k, x0 in enumerate(inits):
        fresh = fc.run(lsq_sized, fc.make(name, **hp), rounds=4, seed=k, engine="loop", sampling="full",
                       local=WORK, init=x0, per_client_metrics=False)
        assert torch.equal(states[k].x, fresh.params)


@pytest.mark.parametrize("name,hp", ENGINE_ALGORITHMS, ids=IDS)
def test_a_run_changes_neither_the_algorithm_nor_the_task(lsq_sized, name, hp):
    algo = fc.make(name, **hp)
    before = copy.deepcopy(vars(algo))
    data = (lsq_sized.x_all.clone(), lsq_sized.y_all.clone(), lsq_sized.weights.clone())
    fc.run(lsq_sized, algo, rounds=3, clients_per_round=None if algo.every_client else 2, local=WORK,
           per_client_metrics=False)
    assert repr(vars(algo)) == repr(before)
    assert all(torch.equal(a, b) for a, b in zip(data, (lsq_sized.x_all, lsq_sized.y_all, lsq_sized.weights)))


def test_aggregate_returns_a_new_state_and_leaves_the_old_one(lsq_sized):
    algo = fc.make("fedvra", gamma=0.5)
    state = algo.init(lsq_sized, torch.ones(lsq_sized.num_params, dtype=lsq_sized.dtype))
    snapshot = (state.x.clone(), [t.clone() for t in state.clients["lam"]], state.server.lam.clone())
    new = play_round(lsq_sized, algo, state, _full_round(lsq_sized, 0), engine="loop", local=WORK)[0]
    assert not torch.equal(new.x, state.x)
    assert torch.equal(state.x, snapshot[0]) and torch.equal(state.server.lam, snapshot[2])
    assert all(torch.equal(a, b) for a, b in zip(state.clients["lam"], snapshot[1]))


@pytest.mark.parametrize("name,hp,client_part", [
    ("fedavg", {}, set()), ("fedvra", {}, {"lam", "gamma"}), ("fedadmm", {}, {"lam"}), ("feddyn", {}, {"grad"}),
    ("scaffold", {}, {"c"}),
])
def test_each_state_says_what_lives_on_the_clients(lsq_sized, name, hp, client_part):
    state = fc.make(name, **hp).init(lsq_sized, torch.zeros(lsq_sized.num_params, dtype=lsq_sized.dtype))
    assert set(state.clients) == client_part
    assert all(len(values) == lsq_sized.num_clients for values in state.clients.values())
    assert set(state.client(2)) == client_part


def test_two_block_assignments_are_client_state(blobs):
    algo = fc.make("two_block", tau=2.0, inner="fedvra")
    state = algo.init(blobs, blobs.init_params(0))
    assert set(state.clients) == {"lam", "gamma", "assignments"}
    assert [len(z) for z in state.clients["assignments"]] == blobs.client_sizes.tolist()
    new = play_round(blobs, algo, state, _full_round(blobs, 0, lr=0.1), engine="loop", local=WORK)[0]
    z = new.clients["assignments"][1]
    assert torch.allclose(z.sum(1), torch.ones(len(z), dtype=z.dtype)) and not torch.equal(z, state.clients[
        "assignments"][1])


def test_two_block_repeated_on_one_task_equals_a_fresh_task(blobs):
    """Regression: the assignments used to be written into task.y_all, so a second run on the same task
    object started from the first run's assignments and gave other numbers from round 1 on."""
    kw = dict(rounds=6, clients_per_round=2, lr=0.1, local=fc.LocalWork(steps=4, batch_size=8), seed=3)
    algo = fc.make("two_block", tau=2.0, inner="fedvra", inner_hyperparameters={"gamma": 0.5})
    first = fc.run(blobs, algo, **kw)
    second = fc.run(blobs, algo, **kw)
    fresh_task = copy.deepcopy(blobs)
    fresh = fc.run(fresh_task, fc.make("two_block", tau=2.0, inner="fedvra", inner_hyperparameters={"gamma": 0.5}),
                   **kw)
    assert first.history.equals(second.history) and first.history.equals(fresh.history)
    assert (blobs.y_all == 0).all(), "the task's stored targets are untouched"


def test_scaffold_round_by_hand(lsq_sized):
    """Option II, two clients of four, two full-batch steps each, every quantity written out."""
    task, eta, q = lsq_sized, 0.1, 2
    algo = fc.make("scaffold", server_lr=0.5, option="II")
    x0 = torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=task.dtype)
    state = algo.init(task, x0)
    c_global = torch.tensor([0.01, 0.02, -0.03, 0.04], dtype=task.dtype)
    c_own = [torch.full((4,), 0.1 * (i + 1), dtype=task.dtype) for i in range(4)]
    state = type(state)(type(state.server)(x0, c_global, 4), {"c": tuple(c_own)})
    active = torch.tensor([1, 3])
    info = RoundInfo(0, active, torch.full((4,), 0.5, dtype=task.dtype), torch.tensor([q, q]), eta, task.weights)
    new = play_round(task, algo, state, info, engine="loop", local=fc.LocalWork(steps=q, batch_size=None))[0]
    y, c_plus = {}, {}
    for i in (1, 3):
        a, b = task.client_data(i)
        yi = x0.clone()
        for _ in range(q):  # y <- y - eta (grad f_i(y) - c_i + c)
            yi = yi - eta * (a.T @ (a @ yi - b) / len(b) - c_own[i] + c_global)
        y[i] = yi
        c_plus[i] = c_own[i] - c_global + (x0 - yi) / (q * eta)
    x_expected = x0 + 0.5 * ((y[1] - x0) + (y[3] - x0)) / 2
    c_expected = c_global + ((c_plus[1] - c_own[1]) + (c_plus[3] - c_own[3])) / 4
    assert torch.allclose(new.x, x_expected, atol=1e-15, rtol=0)
    assert torch.allclose(new.server.c, c_expected, atol=1e-15, rtol=0)
    for i in (1, 3):
        assert torch.allclose(new.clients["c"][i], c_plus[i], atol=1e-15, rtol=0)
    for i in (0, 2):
        assert torch.equal(new.clients["c"][i], c_own[i]), "inactive clients keep their control variate"


@pytest.mark.parametrize("rule,vectors,scalars", [("split", 1, 1), ("direct", 2, 0)])
def test_fedvra_upload_counts(lsq, rule, vectors, scalars):
    """split: Delta_i and the scalar a_i (P + 1 floats); direct (eq. 10): Delta_i and lambda_i (2 P)."""
    p, rounds, m = lsq.num_params, 3, 2
    r = fc.run(lsq, fc.make("fedvra", server_update=rule), rounds=rounds, clients_per_round=m,
               local=fc.LocalWork(steps=1))
    expected = rounds * m * (vectors * p + scalars)
    assert r.metric("uploaded_floats").iloc[-1] == expected
    assert r.metric("downloaded_floats").iloc[-1] == rounds * m * p


def test_kept_entries_own_their_memory_so_a_rounds_tensor_is_freed(lsq_sized):
    """A client's new entry is row k of the round's [K, P] result: the state keeps a copy of that row only (a view
    would keep the whole [K, P] alive), replaces exactly the active clients' entries and leaves the old tuple as
    it was."""
    from fedcompanion.protocol import replace_entries

    old = tuple(torch.zeros(4, 3).unbind(0))
    rows = torch.arange(6.0).reshape(2, 3)
    new = replace_entries(old, torch.tensor([3, 1]), rows)
    assert torch.equal(new[3], rows[0]) and torch.equal(new[1], rows[1])
    assert new[0] is old[0] and new[2] is old[2]
    assert all(e.untyped_storage().nbytes() == e.nbytes for e in (new[1], new[3]))
    assert all(torch.equal(e, torch.zeros(3)) for e in old)
    rows.add_(1.0)  # the round's tensor may be reused or freed: the kept entries do not change with it
    assert torch.equal(new[3], torch.arange(3.0))
    own = torch.ones(3)
    assert replace_entries(old, torch.tensor([0]), [own])[0] is own  # a tensor of its own is kept as it is

    algo = fc.make("fedvra", gamma=0.5)
    state = algo.init(lsq_sized, torch.ones(lsq_sized.num_params, dtype=lsq_sized.dtype))
    new_state = play_round(lsq_sized, algo, state, _full_round(lsq_sized, 0), engine="loop", local=WORK)[0]
    assert all(e.untyped_storage().nbytes() == e.nbytes for e in new_state.clients["lam"])


@pytest.mark.parametrize("name,hp", [("scaffold", {"option": "II"}), ("feddyn", {"alpha": 0.3})])
def test_scaffold_and_feddyn_ignore_the_client_weights(lsq_sized, name, hp):
    """Their averages are unweighted by design, so the same run with size or uniform weights gives the same model
    (fedvra/04 lets one run serve both weightings)."""
    import dataclasses

    n = lsq_sized.num_clients
    uniform = dataclasses.replace(lsq_sized, weights=torch.full((n,), 1.0 / n, dtype=lsq_sized.weights.dtype))
    assert not torch.equal(uniform.weights, lsq_sized.weights)
    runs = [fc.run(task, fc.make(name, **hp), rounds=4, lr=0.05, local=WORK, clients_per_round=3, seed=0,
                   per_client_metrics=False) for task in (lsq_sized, uniform)]
    assert torch.equal(runs[0].params, runs[1].params)


@pytest.mark.parametrize("name,hp", [("fedavg", {}), ("iceadmm", {"k0": 2})])
def test_a_small_run_computes_on_one_thread_and_leaves_the_count_as_it_was(lsq, name, hp):
    """A small problem runs on one torch thread by default (as every run of a sweep; two threads made ICEADMM on
    n = 100 3-5x slower on a loaded machine), ``threads`` overrides it, and the process's count is restored."""
    from fedcompanion.validation import ConfigError

    seen = []
    probe = {"threads": lambda x: seen.append(torch.get_num_threads()) or 0.0}
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fc.run(lsq, fc.make(name, **hp), 2, extra_metrics=probe)
        assert set(seen) == {1} and torch.get_num_threads() == 2
        seen.clear()
        fc.run(lsq, fc.make(name, **hp), 2, extra_metrics=probe, threads=2)
        assert set(seen) == {2}
        with pytest.raises(ConfigError, match="threads"):
            fc.run(lsq, fc.make(name, **hp), 2, threads=0)
    finally:
        torch.set_num_threads(before)
