"""The AdaFedAdam paper's algorithms against exact answers: DMOP, AdaFedAdam = Adam, FedOpt, FedNova,
q-FedAvg, FedMGDA+, and the local optimiser's momentum and weight decay."""
import math

import numpy as np
import pytest
import torch

import fedcompanion as fc
from fedcompanion.algorithms.adafedadam import alpha_fair_objective, dmop_objective
from fedcompanion.algorithms.fedmgda import min_norm_weights
from fedcompanion.protocol import RoundInfo

FULL_STEP = fc.LocalWork(steps=1, batch_size=None)


@pytest.fixture(scope="module")
def logistic():
    """Four clients of unequal size, binary labels, no bias: F_k(0) = log 2 for every client."""
    rng = np.random.default_rng(0)
    clients = []
    for k, n in enumerate([12, 30, 18, 25]):
        a = rng.normal(size=(n, 5)) + 0.3 * k
        clients.append((a, (a @ np.linspace(-1, 1, 5) + rng.normal(size=n) > 0).astype(float)))
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(5, 1, bias=False))
    return fc.tasks.from_client_arrays("logistic", clients, net, "logistic", dtype=torch.float64)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 3.0])
def test_dmop_gradient_is_proportional_to_the_alpha_fair_gradient(logistic, alpha):
    x0 = torch.zeros(5, dtype=torch.float64)
    initial = logistic.evaluate_clients(x0)[0]
    assert torch.allclose(initial, torch.full_like(initial, math.log(2)), atol=1e-15)  # all F_k(x^0) equal
    x_t = torch.tensor([0.3, -0.1, 0.2, 0.5, -0.4], dtype=torch.float64, requires_grad=True)
    (g_fair,) = torch.autograd.grad(alpha_fair_objective(logistic, x_t, alpha), x_t)
    (g_dmop,) = torch.autograd.grad(dmop_objective(logistic, x_t, x_t.detach(), x0, alpha), x_t)
    # grad F(x^t, t) = F(x^0)^(-alpha) * grad of the alpha-fair objective
    assert torch.allclose(g_dmop, g_fair / math.log(2) ** alpha, rtol=1e-12, atol=1e-14)
    if alpha == 0:
        (g_plain,) = torch.autograd.grad(logistic.weights @ torch.stack(
            [logistic.client_loss(k, x_t) for k in range(4)]), x_t)
        assert torch.allclose(g_dmop, g_plain, rtol=1e-14, atol=0)


def test_adafedadam_with_alpha_0_and_one_full_step_is_adam(logistic):
    """Full participation, one full-batch local SGD step, alpha = 0: C = 1 and the pseudo-gradient is
    sum_k p_k grad F_k(x^t), so the run is torch.optim.Adam on F, round for round (60 rounds)."""
    x0 = torch.tensor([0.2, -0.3, 0.1, 0.05, 0.4], dtype=torch.float64)
    run = fc.run(logistic, fc.make("adafedadam", alpha=0.0, server_lr=0.05), rounds=60, lr=0.1, init=x0,
                 local=FULL_STEP, engine="loop", per_client_metrics=False, eval_every=60)
    x = x0.clone().requires_grad_(True)
    adam = torch.optim.Adam([x], lr=0.05, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(60):
        adam.zero_grad()
        objective = logistic.weights @ torch.stack([logistic.client_loss(k, x) for k in range(4)])
        objective.backward()
        adam.step()
    assert float((run.params - x.detach()).abs().max()) < 1e-10
    assert float((run.params - x0).norm()) > 0.5, "it moved"


def _reference_adafedadam(updates, grad_norms, losses, initial, sizes, lr_local, alpha, weighting, warmup, steps,
                          server_lr=1e-3, betas=(0.9, 0.999), eps=1e-8, p=3, normalise=True, certainty=True):
    """An independent, coordinate-by-coordinate reading of the paper's Algorithm 1 in plain Python floats (its
    ablations: ``normalise=False`` divides no update by eta'_k, ``certainty=False`` takes C = 1)."""
    x, m, v, b1, b2 = [0.0] * p, [0.0] * p, [0.0] * p, 1.0, 1.0
    for t in range(steps):
        k_all = range(len(updates[t]))
        norms = [math.sqrt(sum(u * u for u in updates[t][k])) for k in k_all]
        scale = [norms[k] / grad_norms[t][k] for k in k_all]
        cert = [math.log(scale[k] / lr_local) + 1 for k in k_all]
        if weighting == "paper":
            raw = [sizes[k] * (losses[t][k] / initial[k]) ** alpha for k in k_all]
        else:
            raw = [sizes[k] * losses[t][k] for k in k_all]
        q = [r / sum(raw) for r in raw]
        c = sum(q[k] * cert[k] for k in k_all) if certainty else 1.0
        if not normalise:
            scale = [1.0] * len(scale)
        beta1, beta2 = betas[0] ** c, betas[1] ** c
        b1, b2 = b1 * beta1, b2 * beta2
        lr = server_lr * c if t + 1 > warmup else server_lr
        for j in range(p):
            g = sum(q[k] * updates[t][k][j] / scale[k] for k in k_all)
            m[j] = beta1 * m[j] + (1 - beta1) * g
            v[j] = beta2 * v[j] + (1 - beta2) * g * g
            x[j] -= lr / (1 - b1) * m[j] / (math.sqrt(v[j]) / math.sqrt(1 - b2) + eps)
    return x


@pytest.mark.parametrize("weighting,warmup,alpha", [("paper", 0, 1.0), ("paper", 0, 2.5), ("code", 6, 1.0)])
def test_adafedadam_server_step_matches_an_independent_reading(weighting, warmup, alpha):
    rng = np.random.default_rng(1)
    steps, k, p = 9, 3, 3
    updates = rng.normal(size=(steps, k, p)) * rng.uniform(0.1, 2, size=(steps, k, 1))
    grad_norms = rng.uniform(0.5, 3, size=(steps, k))
    losses = rng.uniform(0.2, 2, size=(steps, k))
    initial, sizes = rng.uniform(1, 3, size=k), np.array([10.0, 25.0, 5.0])
    expected = _reference_adafedadam(updates.tolist(), grad_norms.tolist(), losses.tolist(), initial.tolist(),
                                     sizes.tolist(), 0.01, alpha, weighting, warmup, steps)
    algo = fc.make("adafedadam", alpha=alpha, weighting=weighting, warmup_steps=warmup)
    state = algo.init_server(None, torch.zeros(p, dtype=torch.float64))
    t64 = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    for t in range(steps):
        state = algo.server_step(state, t64(updates[t]), t64(grad_norms[t]), t64(losses[t]), t64(initial),
                                 t64(sizes), 0.01)
    assert np.allclose(state.x.numpy(), expected, rtol=1e-12, atol=1e-15)
    assert state.opt.step == steps and abs(state.opt.certainty - 1) > 0.1, "certainties other than 1 were exercised"


@pytest.mark.parametrize("normalise,certainty", [(False, True), (True, False), (False, False)])
def test_each_ablation_matches_the_independent_reading(normalise, certainty):
    """The ablations of the three changes: without normalisation, without certainty, both (with alpha = 0 as
    well, what is left is Adam with bias correction on the size-weighted mean update)."""
    rng = np.random.default_rng(2)
    steps, k, p = 7, 4, 3
    updates = rng.normal(size=(steps, k, p)) * rng.uniform(0.1, 2, size=(steps, k, 1))
    grad_norms, losses = rng.uniform(0.5, 3, size=(steps, k)), rng.uniform(0.2, 2, size=(steps, k))
    initial, sizes = rng.uniform(1, 3, size=k), np.array([10.0, 25.0, 5.0, 12.0])
    t64 = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    for alpha in (0.0, 1.5):
        expected = _reference_adafedadam(updates.tolist(), grad_norms.tolist(), losses.tolist(), initial.tolist(),
                                         sizes.tolist(), 0.01, alpha, "paper", 0, steps, normalise=normalise,
                                         certainty=certainty)
        algo = fc.make("adafedadam", alpha=alpha, normalise=normalise, certainty=certainty)
        state = algo.init_server(None, torch.zeros(p, dtype=torch.float64))
        for t in range(steps):
            state = algo.server_step(state, t64(updates[t]), t64(grad_norms[t]), t64(losses[t]), t64(initial),
                                     t64(sizes), 0.01)
        assert np.allclose(state.x.numpy(), expected, rtol=1e-12, atol=1e-15)
        assert (state.opt.certainty == 1.0) == (not certainty)
    with pytest.raises(fc.ConfigError, match="normalise must be True or False"):
        fc.make("adafedadam", normalise="no")


def test_code_mode_scales_by_certainty_from_the_seventh_step_only():
    algo = fc.make("adafedadam", weighting="code", warmup_steps=6)
    update = torch.tensor([[0.5, -0.5]], dtype=torch.float64)
    # eta' = ||update|| / ||grad|| = 0.707 / 0.0707 = 10 eta_k with eta_k = 1: C = ln 10 + 1
    one = torch.ones(1, dtype=torch.float64)
    args = (one * math.sqrt(0.5) / 10, one, one, one, 1.0)
    state, moves = algo.init_server(None, torch.zeros(2, dtype=torch.float64)), []
    for _ in range(8):
        new = algo.server_step(state, update, *args)
        moves.append(float((new.x - state.x).abs().max()))
        state = new
    c = math.log(10) + 1
    assert abs(state.opt.certainty - c) < 1e-9
    # Adam's step is lr * m_hat / sqrt(v_hat) = lr for a constant gradient: 1e-3 for 6 steps, then C * 1e-3
    assert np.allclose(moves[:6], 1e-3, rtol=1e-6) and np.allclose(moves[6:], c * 1e-3, rtol=1e-6)


def test_fedadam_hand_computed_step_with_beta1_zero_and_small_tau():
    """beta1 = 0, v_{-1} = tau^2: x_1 = x_0 - eta g / (sqrt(beta2 tau^2 + (1 - beta2) g^2) + tau),
    g = -(weighted mean update); as tau -> 0 this is x_0 - eta sign(g) / sqrt(1 - beta2)."""
    task = fc.tasks.least_squares_task(num_clients=3, dim=4, seed=1)
    info = RoundInfo(0, torch.arange(3), torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.long), 0.1,
                     task.weights)
    deltas = torch.tensor([[1.0, -2.0, 0.5, 0.0], [3.0, 0.0, -1.5, 0.3], [-1.0, 1.0, 1.5, 0.3]], dtype=torch.float64)
    g = -deltas.mean(0)
    for tau in (1e-3, 1e-12):
        algo = fc.make("fedadam", server_lr=0.1, betas=(0.0, 0.99), tau=tau)
        x0 = torch.zeros(4, dtype=torch.float64)
        new = algo.server_update(algo.init_server(task, x0), info, {"delta": deltas})
        expected = x0 - 0.1 * g / (torch.sqrt(0.99 * tau**2 + 0.01 * g * g) + tau)
        assert torch.allclose(new.x, expected, rtol=1e-14, atol=0)
    assert torch.allclose(new.x, -0.1 * torch.sign(g) / math.sqrt(0.01), rtol=1e-9)


def test_fedyogi_and_fedadagrad_second_moments_by_hand():
    task = fc.tasks.least_squares_task(num_clients=2, dim=2, seed=0)
    info = RoundInfo(0, torch.arange(2), torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.long), 0.1,
                     task.weights)
    deltas = torch.tensor([[0.2, -0.4], [0.6, 0.0]], dtype=torch.float64)
    g = -deltas.mean(0)  # (-0.4, 0.2)
    tau, b1, b2 = 1e-3, 0.9, 0.99
    yogi = fc.make("fedyogi", server_lr=1.0, betas=(b1, b2), tau=tau)
    s = yogi.server_update(yogi.init_server(task, torch.zeros(2, dtype=torch.float64)), info, {"delta": deltas})
    v = tau**2 - (1 - b2) * g * g * torch.sign(tau**2 - g * g)
    assert torch.allclose(s.opt.v, v, rtol=1e-15) and torch.allclose(s.x, -(1 - b1) * g / (v.sqrt() + tau), rtol=1e-14)
    adagrad = fc.make("fedadagrad", server_lr=1.0, betas=(b1, b2), tau=tau)
    s = adagrad.server_update(adagrad.init_server(task, torch.zeros(2, dtype=torch.float64)), info, {"delta": deltas})
    assert torch.allclose(s.opt.v, tau**2 + g * g, rtol=1e-15)


def test_fedadam_with_bias_correction_is_torch_adam_on_the_pseudo_gradient(lsq_sized):
    x0 = torch.zeros(lsq_sized.num_params, dtype=torch.float64)
    run = fc.run(lsq_sized, fc.make("fedadam", server_lr=0.05, betas=(0.9, 0.999), tau=1e-8, bias_correction=True),
                 rounds=40, lr=0.1, init=x0, local=FULL_STEP, engine="loop", per_client_metrics=False, eval_every=40)
    x = x0.clone().requires_grad_(True)
    adam = torch.optim.Adam([x], lr=0.05, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(40):  # pseudo-gradient of one full step: lr * sum_i w_i grad f_i(x)
        adam.zero_grad()
        objective = lsq_sized.weights @ torch.stack([lsq_sized.client_loss(i, x) for i in range(4)])
        (0.1 * objective).backward()
        adam.step()
    assert float((run.params - x.detach()).abs().max()) < 1e-10


def test_naccadam_with_one_step_is_adam(lsq_sized):
    x0 = torch.zeros(lsq_sized.num_params, dtype=torch.float64)
    run = fc.run(lsq_sized, fc.make("naccadam", accumulate=1, server_lr=0.05), rounds=30, lr=0.1, init=x0,
                 local=fc.LocalWork(steps=7, batch_size=None), engine="loop", per_client_metrics=False, eval_every=30)
    x = x0.clone().requires_grad_(True)
    adam = torch.optim.Adam([x], lr=0.05)
    for _ in range(30):
        adam.zero_grad()
        (lsq_sized.weights @ torch.stack([lsq_sized.client_loss(i, x) for i in range(4)])).backward()
        adam.step()
    assert float((run.params - x.detach()).abs().max()) < 1e-10


def test_fednova_with_equal_steps_is_fedavg(lsq):
    kw = dict(rounds=5, clients_per_round=3, seed=2, lr=0.05, local=fc.LocalWork(steps=4, batch_size=8),
              per_client_metrics=False)
    assert torch.allclose(fc.run(lsq, fc.make("fednova"), **kw).params, fc.run(lsq, fc.make("fedavg"), **kw).params,
                          rtol=0, atol=1e-14)


def test_fednova_normalises_by_the_local_step_count(lsq_sized):
    info = RoundInfo(0, torch.tensor([0, 2]), torch.ones(4, dtype=torch.float64), torch.tensor([2, 6]), 0.1,
                     lsq_sized.weights)
    deltas = torch.tensor([[1.0, 0, 0, 0], [0, 3.0, 0, 0]], dtype=torch.float64)
    algo = fc.make("fednova")
    x0 = torch.zeros(4, dtype=torch.float64)
    new = algo.server_update(algo.init_server(lsq_sized, x0), info, {"delta": deltas, "a": torch.tensor(
        [2.0, 6.0], dtype=torch.float64)})
    q = lsq_sized.weights[[0, 2]] / lsq_sized.weights[[0, 2]].sum()
    tau_eff = q[0] * 2 + q[1] * 6
    assert torch.allclose(new.x, tau_eff * (q[0] * deltas[0] / 2 + q[1] * deltas[1] / 6), rtol=1e-15)
    from fedcompanion.algorithms.fednova import normaliser

    mu, tau = 0.9, 5  # sum_{t<tau} (1 - mu^(t+1)) / (1 - mu), the weights momentum SGD gives the gradients
    assert abs(float(normaliser(torch.tensor([tau]), mu)) - sum((1 - mu ** (t + 1)) / (1 - mu)
                                                                for t in range(tau))) < 1e-12


def test_qfedavg_with_q_0_is_the_plain_average(lsq):
    kw = dict(rounds=5, clients_per_round=3, seed=2, lr=0.05, local=fc.LocalWork(steps=4, batch_size=8),
              per_client_metrics=False)
    assert torch.allclose(fc.run(lsq, fc.make("qfedavg", q=0.0), **kw).params,
                          fc.run(lsq, fc.make("fedavg"), **kw).params, rtol=0, atol=1e-14)  # equal weights here


def test_qfedavg_step_by_hand(lsq_sized):
    info = RoundInfo(0, torch.tensor([1, 3]), torch.ones(4, dtype=torch.float64), torch.tensor([1, 1]), 0.5,
                     lsq_sized.weights)
    x0 = torch.tensor([1.0, 0.0, -1.0, 0.5], dtype=torch.float64)
    x_local = torch.stack([x0 - 0.1, x0 + 0.2])
    losses = torch.tensor([2.0, 0.5], dtype=torch.float64)
    from fedcompanion.protocol import LocalObjective, LocalResult

    algo = fc.make("qfedavg", q=2.0)
    objective = LocalObjective.sgd(x0, info.steps, info.lr)
    _, up = algo.client_update(lsq_sized, {"x": x0}, None, info, LocalResult(x_local, objective, (losses, None)))
    L = 2.0  # noqa: N806  (1 / lr)
    dw = L * (x0 - x_local)
    delta = losses[:, None] ** 2 * dw
    h = 2 * losses * (dw * dw).sum(1) + L * losses**2
    assert torch.allclose(up["delta"], delta) and torch.allclose(up["h"], h)
    new = algo.server_update(algo.init_server(lsq_sized, x0), info, up)
    assert torch.allclose(new.x, x0 - delta.sum(0) / h.sum(), rtol=1e-15)


@pytest.mark.parametrize("epsilon,weights,expected_lambda", [(1.0, (0.5, 0.5), (0.5, 0.5)),
                                                             (0.2, (0.9, 0.1), (0.7, 0.3)),
                                                             (0.0, (0.9, 0.1), (0.9, 0.1))])
def test_fedmgda_direction_is_the_min_norm_point(epsilon, weights, expected_lambda):
    """g1 = (1, 0), g2 = (0.6, 0.8): on the segment the min-norm point has lambda = g2.(g2 - g1)/|g1 - g2|^2 = 0.5;
    inside an epsilon-box around (0.9, 0.1) it is the box's nearest corner to 0.5."""
    n = 2
    task = fc.tasks.least_squares_task(num_clients=n, dim=2, seed=0)
    w = torch.tensor(weights, dtype=torch.float64)
    info = RoundInfo(0, torch.arange(n), torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.long), 0.1, w)
    x0 = torch.zeros(2, dtype=torch.float64)
    deltas = -torch.tensor([[3.0, 0.0], [1.2, 1.6]], dtype=torch.float64)  # x_i - x; normalised: g1, g2
    algo = fc.make("fedmgda+", server_lr=1.0, epsilon=epsilon)
    new = algo.server_update(algo.init_server(task, x0), info, {"delta": deltas})
    lam = torch.tensor(expected_lambda, dtype=torch.float64)
    direction = lam[0] * torch.tensor([1.0, 0.0]) + lam[1] * torch.tensor([0.6, 0.8])
    assert torch.allclose(new.x, -direction.double(), atol=1e-12)


def test_min_norm_weights_satisfy_the_kkt_conditions():
    rng = np.random.default_rng(0)
    g = torch.tensor(rng.normal(size=(6, 4)), dtype=torch.float64)
    gram, center = g @ g.T, torch.full((6,), 1 / 6, dtype=torch.float64)
    lam = min_norm_weights(gram, center, 1.0)
    grad = 2 * gram @ lam
    assert abs(float(lam.sum()) - 1) < 1e-14 and (lam >= 0).all()
    support = lam > 1e-10  # stationarity on the simplex: equal gradient on the support, no smaller one off it
    assert float(grad[support].max() - grad[support].min()) < 1e-9
    assert (~support).any() and float(grad[~support].min()) >= float(grad[support].max()) - 1e-9


def test_min_norm_weights_do_not_depend_on_the_blas_threads():
    """The same Gram matrices give bit-identical weights whatever BLAS thread count the caller has set (with
    OpenBLAS's own choice, SLSQP's last bits changed between one and two threads)."""
    import scipy.optimize  # noqa: F401  (loads scipy's own OpenBLAS, so that the limits below reach it)
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    cases = []
    for k in [5] * 20 + [10] * 20:  # among these, the unguarded solver's weights differed in 2 threads
        g = rng.normal(size=(k, 50))
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        cases.append((torch.tensor(g @ g.T), torch.full((k,), 1 / k, dtype=torch.float64)))
    results = []
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="blas"):
            results.append([min_norm_weights(gram, center, 0.1).numpy().tobytes() for gram, center in cases])
    assert results[0] == results[1]


@pytest.mark.parametrize("carry", [False, True])
def test_local_momentum_and_weight_decay_are_torch_sgd(lsq_sized, carry):
    """One client, full participation, two rounds of three mini-batch steps: the loop engine's local work is
    torch.optim.SGD(momentum, weight_decay) on the client's model, with the buffer reset or carried."""
    task, lr, mu, wd = lsq_sized, 0.05, 0.9, 5e-3
    work = fc.LocalWork(steps=3, batch_size=3, momentum=mu, weight_decay=wd, momentum_reset=not carry)
    x0 = torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=torch.float64)
    run = fc.run(task, fc.make("fedavg"), rounds=2, sampling=lambda r: np.eye(4)[0], lr=lr, local=work, init=x0,
                 engine="loop", per_client_metrics=False, seed=4)
    model = torch.nn.Linear(4, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(x0[None])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=mu, weight_decay=wd)
    a, b = task.client_data(0)
    for r in range(2):
        if not carry:
            optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=mu, weight_decay=wd)
        for rows in fc.engine.batch_indices(4, r, 0, len(b), 3, 3):
            optimizer.zero_grad()
            (0.5 * ((model(a[rows]).squeeze(-1) - b[rows]) ** 2).mean()).backward()
            optimizer.step()
    assert torch.allclose(run.params, model.weight.detach()[0], rtol=0, atol=1e-15)


@pytest.mark.parametrize("carry", [False, True])
def test_batched_engine_momentum_equals_the_loop_engine(carry, mlp_path):
    task = fc.tasks.federated_dataset_task("mnist", 12, "dirichlet", "mlp", seed=1, alpha=0.5, hidden=(8,),
                                           l2=1e-3, dtype=torch.float64)
    work = fc.LocalWork(steps_range=(1, 5), batch_size=8, momentum=0.9, weight_decay=5e-4, momentum_reset=not carry)
    kw = dict(rounds=3, clients_per_round=5, seed=2, lr=0.05, local=work, per_client_metrics=False, eval_every=3)
    for name, hp in [("fedavg", {}), ("fedvra", {"gamma": 0.3}), ("adafedadam", {"alpha": 1.0})]:
        loop = fc.run(task, fc.make(name, **hp), engine="loop", **kw)
        batched = fc.run(task, fc.make(name, **hp), engine=mlp_path, **kw)
        assert float((loop.params - batched.params).norm() / loop.params.norm()) < 1e-12, name
