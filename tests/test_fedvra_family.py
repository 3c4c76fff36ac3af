"""FedVRA and its relatives: identities between algorithms, Lemma 1, exact optima, (un)biasedness."""
import itertools

import numpy as np
import pytest
import torch

import fedcompanion as fc
from fedcompanion.driver import play_round
from fedcompanion.engine import batch_indices
from fedcompanion.protocol import LocalResult, RoundInfo

HLU = fc.LocalWork(steps_range=(1, 4), batch_size=4)  # mini-batches and time-varying local work


def _run(task, name, rounds=6, m=2, seed=3, **hp):
    return fc.run(task, fc.make(name, **hp), rounds=rounds, clients_per_round=m, seed=seed, lr=0.05,
                  local=HLU, eval_every=rounds, per_client_metrics=False)


def _same(a, b, tol=1e-12):
    return float((a.params - b.params).norm() / b.params.norm()) < tol


def test_fedvra_a1_d1_is_fedadmm(lsq_sized):
    assert _same(_run(lsq_sized, "fedvra", gamma=0.7, dual_stepsize=1.0, aggregation_stepsize=1.0),
                 _run(lsq_sized, "fedadmm", gamma=0.7))


def test_split_server_update_equals_eq10(lsq_sized):
    hp = dict(gamma=[0.3, 0.6, 0.9, 1.2], dual_stepsize=0.5, aggregation_stepsize=1.7)
    assert _same(_run(lsq_sized, "fedvra", server_update="split", **hp),
                 _run(lsq_sized, "fedvra", server_update="direct", **hp))


def test_fedvra_a0_is_unbiased_fedprox(lsq_sized):
    """a = 0, d = N/m, gamma = mu: FedProx with x0 + (N/m) sum_A w_i Delta_i (unequal w_i here)."""
    assert _same(_run(lsq_sized, "fedvra", gamma=0.4, dual_stepsize=0.0, aggregation_stepsize=2.0),
                 _run(lsq_sized, "fedprox", mu=0.4, aggregation="unbiased"))


def test_fedvra_a0_is_plain_fedprox_with_equal_weights(lsq):
    assert _same(_run(lsq, "fedvra", m=3, gamma=0.4, dual_stepsize=0.0),
                 _run(lsq, "fedprox", m=3, mu=0.4))


def test_fedvra_a1_is_feddyn_with_equal_weights(lsq):
    assert _same(_run(lsq, "fedvra", m=3, gamma=0.8, dual_stepsize=1.0, aggregation_stepsize=2.0),
                 _run(lsq, "feddyn", m=3, alpha=0.8))


def _ls_grad(task, i, x, rows):
    a, b = task.client_data(i)
    a, b = a[rows], b[rows]
    return a.T @ (a @ x - b) / len(b)


def test_lemma1_fedadmm_is_client_variance_reduction(lsq_sized):
    r"""Eq. (11): the FedADMM local step is SGD on g_i + gamma beta lambda^r - lambda_i^r plus a pull
    towards the averaged past model beta sum_j w_j gamma x_j^r; eq. (14): lambda_i^{r+1} is the
    convex combination (1 - theta) lambda_i^r + theta G_i^r, theta = a gamma eta ||b||_1."""
    task, gamma, eta, a, seed = lsq_sized, 0.7, 0.05, 1.0, 0
    algo = fc.make("fedvra", gamma=gamma, dual_stepsize=a, aggregation_stepsize=1.0)
    state = algo.init(task, torch.zeros(task.num_params, dtype=task.dtype))
    w, beta = task.weights, 1 / gamma
    x_prev_local = state.x.expand(4, -1).clone()  # x_j^r of every client
    rng = np.random.default_rng(0)
    for r in range(4):
        clients = torch.as_tensor(np.sort(rng.choice(4, 2, replace=False)))
        info = RoundInfo(r, clients, torch.full((4,), 0.5, dtype=task.dtype), torch.tensor([3, 3]), eta, w)
        if r > 0:  # x_0^r = beta sum_j w_j gamma x_j^r - beta lambda^r
            assert torch.allclose(state.x, beta * gamma * (w @ x_prev_local) - beta * state.server.lam, atol=1e-12)
        lam_before, expected_lam = state.rows("lam"), {}
        old_x, old_lam = state.x, state.server.lam
        state, _, _, local = play_round(task, algo, state, info, engine="loop", seed=seed,
                                        local=fc.LocalWork(steps=3, batch_size=4))
        x_local = local.x
        for k, i in enumerate(clients.tolist()):
            rows = batch_indices(seed, r, i, int(task.client_sizes[i]), 3, 4)
            x, grads = old_x.clone(), []
            avg_past = beta * gamma * (w @ x_prev_local)
            for t in range(3):  # eq. (11), written with the corrected gradient
                g = _ls_grad(task, i, x, rows[t])
                grads.append(g)
                corrected = g + gamma * beta * old_lam - lam_before[i]
                x = x - eta * (corrected + gamma * (x - avg_past))
            assert torch.allclose(x, x_local[k], atol=1e-12)
            b = torch.tensor([(1 - eta * gamma) ** (3 - 1 - t) for t in range(3)], dtype=task.dtype)
            big_g = sum(bt / b.sum() * g for bt, g in zip(b, grads))
            theta = a * gamma * eta * b.sum()
            assert 0 < theta < 1
            expected_lam[i] = (1 - theta) * lam_before[i] + theta * big_g
        x_prev_local = old_x.expand(4, -1).clone()
        x_prev_local[clients] = x_local
        for i, expected in expected_lam.items():
            assert torch.allclose(state.clients["lam"][i], expected, atol=1e-12)


def _fixed_point_local_sgd(task, eta, q, mu=0.0):
    """FedAvg/FedProx full-batch fixed point: x = sum_i w_i (M_i x + v_i) with local steps affine in x0."""
    p = task.num_params
    eye = torch.eye(p, dtype=task.dtype)
    m_sum, v_sum = torch.zeros(p, p, dtype=task.dtype), torch.zeros(p, dtype=task.dtype)
    for i in range(task.num_clients):
        a, b = task.client_data(i)
        h, c = a.T @ a / len(b), a.T @ b / len(b)
        t = eye - eta * (h + mu * eye)
        powers = [torch.linalg.matrix_power(t, k) for k in range(q)]
        m_sum += task.weights[i] * (torch.linalg.matrix_power(t, q) + eta * mu * sum(powers))
        v_sum += task.weights[i] * eta * sum(powers) @ c
    return torch.linalg.solve(eye - m_sum, v_sum)


@pytest.mark.parametrize("name,hp", [("fedvra", dict(gamma=1.0, dual_stepsize=0.5)),
                                     ("fedadmm", dict(gamma=1.0)), ("feddyn", dict(alpha=1.0)),
                                     ("scaffold", dict(option="II")), ("scaffold", dict(option="I"))])
def test_variance_reduced_methods_reach_the_optimum(lsq, name, hp):
    x_star, _ = lsq.optimum
    r = fc.run(lsq, fc.make(name, **hp), rounds=400, lr=0.05, local=fc.LocalWork(steps=5, batch_size=None),
               eval_every=400, per_client_metrics=False, init=torch.zeros(lsq.num_params, dtype=lsq.dtype))
    assert float((r.params - x_star).norm() / x_star.norm()) < 1e-6


@pytest.mark.parametrize("name,mu", [("fedavg", 0.0), ("fedprox", 0.3)])
def test_fedavg_and_fedprox_stop_at_the_client_drift_fixed_point(lsq, name, mu):
    x_star, _ = lsq.optimum
    hp = {"mu": mu} if name == "fedprox" else {}
    r = fc.run(lsq, fc.make(name, **hp), rounds=400, lr=0.05, local=fc.LocalWork(steps=5, batch_size=None),
               eval_every=400, per_client_metrics=False, init=torch.zeros(lsq.num_params, dtype=lsq.dtype))
    x_drift = _fixed_point_local_sgd(lsq, 0.05, 5, mu)
    bias = float((x_drift - x_star).norm() / x_star.norm())
    assert float((r.params - x_drift).norm() / x_star.norm()) < 1e-10, "converged to the predicted point"
    assert bias > 1e-5, f"which is not the optimum (relative bias {bias:.1e})"


def _aggregate(task, algo, state, info, x_local):
    """The round's server step for given local models (the local work already done)."""
    own, received = state.active(info.clients), algo.broadcast(state)
    objective = algo.local_objective(task, received, own, info)
    new_clients, uploads = algo.client_update(task, received, own, info, LocalResult(x_local, objective))
    return state.updated(algo.server_update(state.server, info, uploads), info.clients, new_clients)


def test_aggregation_stepsize_bias_under_uniform_sampling(lsq):
    r"""Eq. (16): with lambda = 0 and a = 0, x_0^{r+1} = x_0 + beta sum_{A} w_i d gamma Delta_i.
    E over uniform samples of m of N: d = N/m gives the model average beta sum_i w_i gamma x~_i
    (unbiased); d = 1 gives (1 - m/N) x_0 + (m/N) * model average (biased towards the old model)."""
    task, n, m, gamma = lsq, lsq.num_clients, 2, 0.5
    x0 = torch.linspace(-1, 1, task.num_params, dtype=task.dtype)
    everyone = torch.arange(n)
    work = torch.full((n,), 3)
    algo0 = fc.make("fedvra", gamma=gamma, dual_stepsize=0.0, aggregation_stepsize=1.0)
    st = algo0.init(task, x0)
    info_all = RoundInfo(0, everyone, torch.ones(n, dtype=task.dtype), work, 0.05, task.weights)
    full_batch = fc.LocalWork(steps=3, batch_size=None)
    x_tilde = play_round(task, algo0, st, info_all, engine="loop", local=full_batch)[3].x
    average = task.weights @ x_tilde  # beta sum_i w_i gamma x~_i with equal gamma
    probs = torch.full((n,), m / n, dtype=task.dtype)
    for d, expected in [(n / m, average), (1.0, (1 - m / n) * x0 + (m / n) * average)]:
        algo = fc.make("fedvra", gamma=gamma, dual_stepsize=0.0, aggregation_stepsize=d)
        outcomes = []
        for subset in itertools.combinations(range(n), m):  # the exact expectation: all subsets
            s = torch.tensor(subset)
            state = algo.init(task, x0)
            info = RoundInfo(0, s, probs, work[s], 0.05, task.weights)
            outcomes.append(_aggregate(task, algo, state, info, x_tilde[s]).x)
        assert torch.allclose(torch.stack(outcomes).mean(0), expected, atol=1e-12)
    # and the same by Monte Carlo through the real sampler
    sampler = fc.engine.make_sampler("uniform", n, m)
    rng = np.random.default_rng(0)
    algo = fc.make("fedvra", gamma=gamma, dual_stepsize=0.0, aggregation_stepsize="inverse_probability")
    draws = []
    for r in range(3000):
        s, p = sampler.sample(r, rng)
        s = torch.as_tensor(s)
        info = RoundInfo(r, s, torch.as_tensor(p, dtype=task.dtype), work[s], 0.05, task.weights)
        draws.append(_aggregate(task, algo, algo.init(task, x0), info, x_tilde[s]).x)
    spread = (x_tilde - average).norm(dim=1).max()
    assert float((torch.stack(draws).mean(0) - average).norm()) < 0.1 * float(spread)


def test_upload_per_round(lsq):
    p, rounds, m = lsq.num_params, 3, 2
    def uploaded(name, **hp):
        r = fc.run(lsq, fc.make(name, **hp), rounds=rounds, clients_per_round=m, local=fc.LocalWork(steps=1))
        return r.metric("uploaded_floats").iloc[-1], r.metric("downloaded_floats").iloc[-1]
    assert uploaded("fedvra") == (rounds * m * (p + 1), rounds * m * p)  # one vector + one scalar
    assert uploaded("scaffold") == (rounds * m * 2 * p, rounds * m * 2 * p)  # two vectors each way
    assert uploaded("fedavg") == (rounds * m * p, rounds * m * p)


def test_bad_fedvra_input_is_named():
    with pytest.raises(fc.ConfigError, match="gamma must be > 0"):
        fc.make("fedvra", gamma=0.0)
    with pytest.raises(fc.ConfigError, match="dual_stepsize must be >= 0"):
        fc.make("fedvra", dual_stepsize=-1.0)
    with pytest.raises(fc.ConfigError, match="unknown server_update"):
        fc.make("fedvra", server_update="both")
    with pytest.raises(fc.ConfigError, match="unknown option 'III'"):
        fc.make("scaffold", option="III")


def test_label_shift_is_twice_the_total_variation_by_hand():
    """Clients with labels [0, 0, 1, 1], [0, 0, 0, 0] and [1, 1, 1, 1]: overall (1/2, 1/2), so 2 TV = 0, 1, 1."""
    from fedcompanion.algorithms.fedvra import label_shift

    clients = [(np.zeros((4, 2)), np.array(y)) for y in ([0, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1])]
    task = fc.tasks.from_client_arrays("labels", clients, torch.nn.Linear(2, 2), "cross_entropy")
    assert label_shift(task, torch.tensor([0, 1, 2])).tolist() == [0.0, 1.0, 1.0]


@pytest.mark.parametrize("rule", ["label_shift", "local_work"])
def test_named_stepsize_rules_equal_the_same_rule_as_a_callable(rule):
    """A named rule gives what a callable computing a_i^r by hand gives: the same run to the last bit."""
    from fedcompanion.algorithms.fedvra import label_shift

    task = fc.tasks.synthetic_task(alpha=1.0, beta=1.0, num_clients=6, seed=0)
    by_hand = {"label_shift": lambda info: label_shift(task, info.clients),
               "local_work": lambda info: info.steps.double() / info.steps.double().mean()}[rule]
    named = _run(task, "fedvra", gamma=0.3, dual_stepsize=rule)
    assert torch.equal(named.params, _run(task, "fedvra", gamma=0.3, dual_stepsize=by_hand).params)
    assert not torch.equal(named.params, _run(task, "fedvra", gamma=0.3, dual_stepsize=1.0).params)


def test_label_shift_refuses_a_task_without_class_labels(blobs):
    """Clustering's targets are rows of assignments, least squares' are numbers: refused before the first round."""
    for task in (blobs, fc.tasks.least_squares_task(num_clients=4, dim=3)):
        with pytest.raises(fc.ConfigError, match="label_shift.*one class label per row"):
            fc.run(task, fc.make("fedvra", dual_stepsize="label_shift"), rounds=1, local=fc.LocalWork(steps=1))


def test_label_shift_is_a_dual_stepsize_only():
    with pytest.raises(fc.validation.ConfigError, match="aggregation_stepsize"):
        fc.make("fedvra", aggregation_stepsize="label_shift")
