"""FedAvgM (server momentum) against exact answers."""
import torch

import fedcompanion as fc


def test_fedavgm_is_heavy_ball_on_the_mean_update(lsq_sized):
    """Full participation, one full-batch step of lr eta per round: the mean update is -eta grad F(x), so
    v <- beta v - eta grad F(x), x <- x + eta_g v, with the gradient written out by hand."""
    task, eta, beta, eta_g = lsq_sized, 0.05, 0.7, 0.8
    x = torch.zeros(task.num_params, dtype=task.dtype)
    result = fc.run(task, fc.make("fedavgm", server_lr=eta_g, momentum=beta), rounds=12, lr=eta, init=x,
                    local=fc.LocalWork(steps=1, batch_size=None))
    v = torch.zeros_like(x)
    for _ in range(12):
        g = torch.zeros_like(x)
        for i in range(task.num_clients):
            a, b = task.client_data(i)
            g += task.weights[i] * a.T @ (a @ x - b) / len(b)
        v = beta * v - eta * g
        x = x + eta_g * v
    assert torch.allclose(result.params, x, atol=1e-12, rtol=0)
    plain = fc.run(task, fc.make("fedavg", server_lr=eta_g), rounds=12, lr=eta, init=torch.zeros_like(x),
                   local=fc.LocalWork(steps=1, batch_size=None))
    assert (result.params - plain.params).abs().max() > 1e-3  # the momentum really moves the iterate


def test_fedavgm_without_momentum_is_fedavg_bit_for_bit(small_mnist):
    kw = dict(rounds=3, clients_per_round=4, seed=2, local=fc.LocalWork(steps=2), per_client_metrics=False)
    a = fc.run(small_mnist, fc.make("fedavg", server_lr=0.5), **kw)
    b = fc.run(small_mnist, fc.make("fedavgm", server_lr=0.5, momentum=0.0), **kw)
    assert torch.equal(a.params, b.params)


def test_fedavgm_checks_its_momentum():
    import pytest

    with pytest.raises(fc.ConfigError, match="momentum"):
        fc.make("fedavgm", momentum=1.0)


def _client_update(task, i, x, eta):
    """Delta_i of one full-batch step of lr eta from x, written out: -eta grad f_i(x)."""
    a, b = task.client_data(i)
    return -eta * a.T @ (a @ x - b) / len(b)


def _mean_update(task, x, eta):
    """The mean client update of one full-batch step from x (every client): -eta grad F(x)."""
    return sum(task.weights[i] * _client_update(task, i, x, eta) for i in range(task.num_clients))


def test_a_fedexp_server_step_is_one_transform_that_reads_the_uploads(lsq_sized):
    """FedExP (Jhunjhunwala et al., 2023): x <- x - eta_g g with eta_g = max(1, sum_i ||Delta_i||^2 / (2 K ||g||^2)),
    a transform of the server optimiser that reads the round's uploads; no server_update of its own. Against the
    rule by hand; plain FedAvg (eta_g = 1) must differ, so the extrapolation really happened."""
    from fedcompanion.algorithms.fedavg import FedAvg
    from fedcompanion.algorithms.server_optimizers import ServerOptimizer

    def fedexp(eps=1e-12):
        def update(g, state, *, uploads, **extra):
            d = uploads["delta"]
            return -max(1.0, float((d * d).sum() / (2 * len(d) * (g @ g) + eps))) * g, state
        return ServerOptimizer(lambda x0: (), update)

    class FedExP(FedAvg):
        def server_optimizer(self):
            return fedexp()

    task, eta = lsq_sized, 0.05
    x = torch.zeros(task.num_params, dtype=task.dtype)
    result = fc.run(task, FedExP(), rounds=6, lr=eta, init=x, local=fc.LocalWork(steps=1, batch_size=None))
    for _ in range(6):
        deltas = torch.stack([_client_update(task, i, x, eta) for i in range(task.num_clients)])
        g = -(task.weights.to(task.dtype) @ deltas)
        x = x - max(1.0, float((deltas * deltas).sum() / (2 * len(deltas) * (g @ g) + 1e-12))) * g
    assert torch.allclose(result.params, x, atol=1e-12, rtol=0)
    plain = fc.run(task, fc.make("fedavg"), rounds=6, lr=eta, init=torch.zeros_like(x),
                   local=fc.LocalWork(steps=1, batch_size=None))
    assert (result.params - plain.params).abs().max() > 1e-6


def test_server_nesterov_momentum_is_trace_with_nesterov(lsq_sized):
    """chain(trace(beta, nesterov=True), scale(-eta_g)): v <- beta v + g, x <- x - eta_g (g + beta v), by hand; the
    heavy-ball trace (nesterov=False) must give another iterate."""
    from fedcompanion.algorithms.fedavg import FedAvg
    from fedcompanion.algorithms.server_optimizers import chain, scale, trace

    class NesterovAvg(FedAvg):
        def server_optimizer(self, nesterov=True):
            return chain(trace(0.7, nesterov=nesterov), scale(-0.8))

    class HeavyBallAvg(NesterovAvg):
        def server_optimizer(self):
            return super().server_optimizer(nesterov=False)

    task, eta = lsq_sized, 0.05
    x, v = torch.zeros(task.num_params, dtype=task.dtype), torch.zeros(task.num_params, dtype=task.dtype)
    kw = dict(rounds=10, lr=eta, local=fc.LocalWork(steps=1, batch_size=None))
    result = fc.run(task, NesterovAvg(), init=x.clone(), **kw)
    for _ in range(10):
        g = -_mean_update(task, x, eta)
        v = 0.7 * v + g
        x = x - 0.8 * (g + 0.7 * v)
    assert torch.allclose(result.params, x, atol=1e-12, rtol=0)
    heavy = fc.run(task, HeavyBallAvg(), init=torch.zeros_like(x), **kw)
    assert (result.params - heavy.params).abs().max() > 1e-6
