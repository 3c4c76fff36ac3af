"""The non-convex regulariser r(x) = sum_k x_k^2 / (1 + x_k^2) and the ADMM family on non-convex tasks, against
closed forms, autograd and independent float64 loops."""
import pytest
import torch

import fedcompanion as fc
from fedcompanion.losses import SATURATING_SQUARE
from fedcompanion.tasks.convex import ClientBlocks
from fedcompanion.validation import ConfigError

LAM = 10.0  # weight of the regulariser: the data Hessian's smallest eigenvalue is ~2.5, so f is non-convex


@pytest.fixture(scope="module")
def small():
    """m = 6 clients, n = 5, lambda = 10: non-convex (min curvature of lambda r is -5)."""
    return fc.tasks.least_squares_task(num_clients=6, dim=5, seed=1, nonconvex=LAM)


def test_saturating_square_closed_forms():
    t = torch.linspace(-4, 4, 81, dtype=torch.float64)
    leaf = t.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(SATURATING_SQUARE.value(leaf[:, None]).sum(), leaf, create_graph=True)
    (second,) = torch.autograd.grad(grad.sum(), leaf)
    assert torch.allclose(SATURATING_SQUARE.grad(t), grad, rtol=0, atol=1e-14)
    assert torch.allclose(SATURATING_SQUARE.curvature(t), second, rtol=0, atol=1e-13)
    # r''(0) = 2 (its Lipschitz constant), r''(+-1) = -1/2 (its lowest curvature), r(1) = 1/2
    one = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64)
    assert SATURATING_SQUARE.curvature(one).tolist() == [-0.5, -0.5, 2.0]
    assert float(SATURATING_SQUARE.value(one)) == 1.0
    assert float(SATURATING_SQUARE.curvature(t).min()) >= SATURATING_SQUARE.min_curvature
    assert float(SATURATING_SQUARE.curvature(t).max()) <= SATURATING_SQUARE.lipschitz


@pytest.mark.parametrize("builder", ["least_squares", "qsar"])
def test_blocks_value_gradient_and_hvp_match_autograd(builder):
    task = (fc.tasks.least_squares_task(num_clients=4, dim=6, seed=0, nonconvex=3.0) if builder == "least_squares"
            else fc.tasks.qsar_logistic_task(num_clients=4, mu=1e-2, setting="authors", nonconvex=0.5))
    b = ClientBlocks.from_task(task)
    n = b.a.shape[-1]
    x = torch.randn(4, n, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    v = torch.randn(4, n, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    value, grad = b.evaluate(x)
    for i in range(4):
        f, g = task.client_value_and_grad(i, x[i])
        assert abs(float(value[i] - f)) <= 1e-12 * abs(float(f))
        assert torch.allclose(grad[i], g, rtol=1e-11, atol=1e-13)
        _, hv = torch.autograd.functional.hvp(lambda z, i=i: task.client_loss(i, z), x[i], v[i])
        assert torch.allclose(b.hvp(x, v)[i], hv, rtol=1e-10, atol=1e-12)


def test_the_task_is_non_convex_and_its_lipschitz_bound_holds(small):
    """The Hessian of f at some point has a negative eigenvalue, and every client's stays within +-r_i."""
    b = ClientBlocks.from_task(small)
    r = b.lipschitz()
    x = torch.ones(5, dtype=torch.float64)  # |x_k| = 1: the regulariser's lowest curvature
    lowest = []
    for i in range(small.num_clients):
        h = torch.autograd.functional.hessian(lambda z, i=i: small.client_loss(i, z), x)
        eig = torch.linalg.eigvalsh(h)
        lowest.append(float(eig[0]))
        assert float(eig.abs().max()) <= float(r[i]) + 1e-12
    assert min(lowest) < 0
    with pytest.raises(NotImplementedError, match="non-convex regulariser"):
        _ = small.optimum


def _start(task, seed, scale):
    return scale * torch.randn(task.num_params, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _by_hand(task, iterations, k0, sigma, local_step, x0):
    """Algorithm 3 / 5 written out with autograd gradients: y, and step_sq of every iteration."""
    m, w = task.num_clients, task.weights.double()
    x = x0.expand(m, -1).clone()
    pi, y, steps = torch.zeros_like(x), None, []
    for k in range(iterations):
        before = (x, pi, y)
        if k % k0 == 0:
            y = (sigma[:, None] * x + pi).sum(0) / sigma.sum()
            x = y.expand(m, -1).clone()
        x = torch.stack([local_step(i, x[i], y, pi[i], w[i], sigma[i]) for i in range(m)])
        pi = pi + sigma[:, None] * (x - y)
        steps.append(sum(float(((a - b) ** 2).sum()) for a, b in zip((x, pi, y), before) if b is not None))
    return y, steps


@pytest.mark.parametrize("k0", [1, 3])
def test_iceadmm_on_a_non_convex_task_is_algorithm_5(small, k0):
    b = ClientBlocks.from_task(small)
    r = b.lipschitz()
    sigma = 2 * b.weights * r

    def step(i, x, y, pi, w, s):  # x+ = (w r x + s y - w grad f_i(x) - pi) / (w r + s)
        return (w * r[i] * x + s * y - w * small.client_grad(i, x) - pi) / (w * r[i] + s)

    y, steps = _by_hand(small, 40, k0, sigma, step, _start(small, 2, 1.5))
    result = fc.run(small, fc.make("iceadmm", k0=k0, sigma=sigma.tolist(), init_scale=1.5), 40, seed=2)
    assert torch.allclose(result.params, y, rtol=0, atol=1e-12)
    assert torch.allclose(torch.tensor(result.metric("step_sq").values, dtype=torch.float64),
                          torch.tensor(steps, dtype=torch.float64),
                          rtol=1e-9, atol=1e-20)


@pytest.mark.parametrize("k0", [1, 4])
def test_ceadmm_on_a_non_convex_task_solves_each_local_problem(small, k0):
    """Algorithm 3 with each local problem w_i f_i(x) + <pi_i, x> + sigma_i/2 ||x - y||^2 solved by plain Newton
    with autograd's Hessian (it is strongly convex: sigma_i = 2 w_i r_i > w_i lambda / 2), against the solver's
    Newton-CG, as a float64 trajectory."""
    b = ClientBlocks.from_task(small)
    sigma = 2 * b.weights * b.lipschitz()

    def step(i, x, y, pi, w, s):
        def local(z):
            return w * small.client_loss(i, z) + pi @ z + 0.5 * s * ((z - y) ** 2).sum()
        z = x.clone()
        for _ in range(40):
            g = torch.autograd.functional.jacobian(local, z)
            if float(g.norm()) < 1e-13:
                break
            z = z - torch.linalg.solve(torch.autograd.functional.hessian(local, z), g)
        return z

    y, _ = _by_hand(small, 12, k0, sigma, step, _start(small, 5, 2.0))
    result = fc.run(small, fc.make("ceadmm", k0=k0, sigma=sigma.tolist(), init_scale=2.0), 12, seed=5)
    assert torch.allclose(result.params, y, rtol=0, atol=1e-9)


def test_non_convex_runs_converge_to_a_stationary_point(small):
    result = fc.run(small, fc.make("iceadmm", k0=2, init_scale=2.0, sigma=(2 * ClientBlocks.from_task(small).weights
                                                            * ClientBlocks.from_task(small).lipschitz()).tolist()
                     ), 3000, tol=1e-20, seed=0)
    assert result.status == "converged"
    grad = sum(float(w) * small.client_grad(i, result.params) for i, w in enumerate(small.weights.double()))
    assert float((grad**2).sum()) < 1e-16


def test_refusals(small):
    with pytest.raises(ConfigError, match="nonconvex"):
        fc.run(small, fc.make("fedavg"), rounds=1)
    with pytest.raises(ConfigError, match="not convex: with nonconvex"):
        fc.run(small, fc.make("ceadmm", sigma=1e-6), 2)
    with pytest.raises(ConfigError, match="nonconvex"):
        fc.tasks.least_squares_task(num_clients=4, dim=3, nonconvex=-1.0)
    with pytest.raises(ConfigError, match="init_scale"):
        fc.make("iceadmm", init_scale=-1.0)


def test_a_random_start_is_the_seeds(small):
    a = fc.run(small, fc.make("iceadmm", init_scale=1.0), 3, seed=1)
    b = fc.run(small, fc.make("iceadmm", init_scale=1.0), 3, seed=1)
    c = fc.run(small, fc.make("iceadmm", init_scale=1.0), 3, seed=2)
    assert torch.equal(a.params, b.params) and not torch.equal(a.params, c.params)
    zero = fc.run(small, fc.make("iceadmm"), 3, seed=1)  # init_scale 0: the authors' zero start, any seed
    assert torch.equal(zero.params, fc.run(small, fc.make("iceadmm"), 3, seed=2).params)
