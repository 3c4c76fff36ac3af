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
