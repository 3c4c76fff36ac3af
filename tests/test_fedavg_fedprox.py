"""FedAvg and FedProx against exact answers."""
import numpy as np
import torch

import fedcompanion as fc
from fedcompanion.engine import LocalObjective, train_loop
from fedcompanion.protocol import RoundInfo


def test_fedavg_one_full_batch_step_is_gradient_descent(lsq_sized):
    """Full participation, one full-batch step, lr eta: x <- x - eta sum_i w_i grad f_i(x)."""
    task, eta = lsq_sized, 0.05
    x = torch.zeros(task.num_params, dtype=task.dtype)
    result = fc.run(task, fc.make("fedavg"), rounds=20, lr=eta, init=x,
                    local=fc.LocalWork(steps=1, batch_size=None))
    # gradient descent with the gradient written out by hand: grad f_i = A_i^T (A_i x - b_i) / n_i
    for _ in range(20):
        g = torch.zeros_like(x)
        for i in range(task.num_clients):
            a, b = task.client_data(i)
            g += task.weights[i] * a.T @ (a @ x - b) / len(b)
        x = x - eta * g
    assert torch.allclose(result.params, x, atol=1e-13, rtol=0)
    assert (task.weights.max() / task.weights.min()) > 2  # the weights really are unequal


def test_fedprox_local_step_by_hand(lsq_sized):
    """Two full-batch steps of x <- x - eta (grad f_i(x) + mu (x - x0)), computed in numpy."""
    task, eta, mu = lsq_sized, 0.1, 0.5
    x0 = torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=task.dtype)
    objective = LocalObjective.sgd(x0, torch.tensor([2, 2]), eta, prox=mu)
    got, _ = train_loop(task, objective, torch.tensor([1, 3]), seed=0, round=0, batch_size=None)
    for k, i in enumerate([1, 3]):
        a, b = (t.numpy() for t in task.client_data(i))
        x = x0.numpy().copy()
        for _ in range(2):
            x = x - eta * (a.T @ (a @ x - b) / len(b) + mu * (x - x0.numpy()))
        np.testing.assert_allclose(got[k].numpy(), x, rtol=0, atol=1e-12)


def test_fedprox_mu_zero_is_fedavg(small_mnist):
    kw = dict(rounds=2, clients_per_round=4, seed=3, local=fc.LocalWork(steps=3), per_client_metrics=False)
    a = fc.run(small_mnist, fc.make("fedavg"), **kw)
    b = fc.run(small_mnist, fc.make("fedprox", mu=0.0), **kw)
    assert torch.equal(a.params, b.params)


def test_unbiased_aggregation_weights_by_inverse_probability(lsq_sized):
    """x0 + sum_{i in A} (w_i / p_i) Delta_i with p_i = m / N."""
    task = lsq_sized
    algo = fc.make("fedavg", aggregation="unbiased")
    state = algo.init(task, torch.zeros(task.num_params, dtype=task.dtype))
    info = RoundInfo(0, torch.tensor([0, 2]), torch.full((4,), 0.5, dtype=task.dtype), torch.tensor([1, 1]),
                     0.1, task.weights)
    x_local = torch.ones(2, task.num_params, dtype=task.dtype)
    out = algo.server_update(state.server, info, {"delta": x_local - state.x})
    expected = float((task.weights[0] + task.weights[2]) / 0.5)
    assert torch.allclose(out.x, torch.full_like(out.x, expected), atol=1e-15, rtol=0)
