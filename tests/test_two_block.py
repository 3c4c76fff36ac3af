"""The two-block (shared centroids + private simplex-constrained assignments) reconstruction."""
import numpy as np
import pytest
import torch

import fedcompanion as fc
from fedcompanion.algorithms.two_block import assignments, clustering_objective, project_rows_to_simplex


def _bisection_projection(v, iters=200):
    """Independent projection: find theta with sum(max(v - theta, 0)) = 1 by bisection."""
    lo, hi = v.min() - 1, v.max()
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.maximum(v - mid, 0).sum() > 1 else (lo, mid)
    return np.maximum(v - (lo + hi) / 2, 0)


def test_simplex_projection_matches_bisection():
    v = torch.randn(50, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    z = project_rows_to_simplex(v)
    expected = np.stack([_bisection_projection(row) for row in v.numpy()])
    np.testing.assert_allclose(z.numpy(), expected, atol=1e-12)


def test_assignment_step_is_the_exact_row_minimiser():
    gen = torch.Generator().manual_seed(1)
    d, tau = torch.rand(20, 5, dtype=torch.float64, generator=gen) * 4, 0.7
    z = assignments(d, tau)
    value = lambda q: (q * d).sum(1) + 0.5 * tau * (q * q).sum(1)  # noqa: E731
    for _ in range(200):  # no feasible point does better
        other = torch.distributions.Dirichlet(torch.ones(5, dtype=torch.float64)).sample((20,))
        assert (value(z) <= value(other) + 1e-12).all()


def _objective_gradient(task, x, tau):
    """grad F at x by the envelope theorem: differentiate sum w_i mean_j <d_j(x), z*_j> with z* fixed."""
    x = x.clone().requires_grad_(True)
    d = task.forward(x, task.x_all)
    z = assignments(d.detach(), tau)
    owner = torch.repeat_interleave(torch.arange(task.num_clients), task.client_sizes)
    row_w = (task.weights / task.client_sizes)[owner]
    (g,) = torch.autograd.grad((row_w * (z * d).sum(1)).sum(), x)
    return g


def test_two_block_fedvra_reaches_a_stationary_point_and_fedavg_drifts(blobs):
    tau = 2.0
    init = torch.tensor([3.0, 1.0, 1.0, 3.0, -3.0, -1.0, -1.0, -3.0], dtype=torch.float64)
    kw = dict(rounds=100, lr=0.1, local=fc.LocalWork(steps=10, batch_size=None), init=init, eval_every=100,
              per_client_metrics=False, engine="batched")
    vra = fc.run(blobs, fc.make("two_block", tau=tau, inner="fedvra", inner_hyperparameters={"gamma": 0.5}), **kw)
    avg = fc.run(blobs, fc.make("two_block", tau=tau, inner="fedavg"), **kw)
    g_vra = float(_objective_gradient(blobs, vra.params, tau).norm())
    g_avg = float(_objective_gradient(blobs, avg.params, tau).norm())
    assert g_vra < 1e-8, "FedVRA's limit satisfies the global first-order condition"
    assert g_avg > 1e-3, "FedAvg's local steps leave a client-drift bias"
    assert clustering_objective(blobs, vra.params, tau) < clustering_objective(blobs, avg.params, tau)


def test_two_block_needs_a_clustering_task(lsq):
    with pytest.raises(fc.ConfigError, match="clustering task"):
        fc.run(lsq, fc.make("two_block"), rounds=1)


def test_two_block_runs_no_probe_and_refuses_inner_algorithms_that_need_one():
    """The probe would score the task's stored zero targets, not the assignments: two_block takes only inner
    algorithms without one (adafedadam and qfedavg are refused, see test_faults), and asks the engine for none."""
    for inner in ("fedvra", "fedavg", "scaffold"):
        wrapped = fc.make("two_block", inner=inner)
        assert not wrapped.needs_probe and not fc.make(inner).needs_probe
    for inner in ("adafedadam", "qfedavg"):
        with pytest.raises(fc.ConfigError, match="needs the losses at the global model"):
            fc.make("two_block", inner=inner)
