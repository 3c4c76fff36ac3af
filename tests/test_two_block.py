"""The two-block reconstruction: shared centroids + private simplex-constrained assignments (clustering), and
the model + private pseudo-labels (semi-supervised)."""
import math

import numpy as np
import pytest
import torch

import fedcompanion as fc
from fedcompanion.algorithms.simplex import assignments, clustering_objective, project_rows_to_simplex


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


def test_a_two_block_run_changes_neither_the_algorithm_nor_the_task(blobs):
    """tests/test_state.py's purity test for the one engine algorithm that needs a clustering task."""
    import copy

    algo = fc.make("two_block", tau=2.0, inner="fedvra", inner_hyperparameters={"gamma": 0.5})
    before = copy.deepcopy(vars(algo))
    data = (blobs.x_all.clone(), blobs.y_all.clone(), blobs.weights.clone())
    first = fc.run(blobs, algo, rounds=3, lr=0.1, local=fc.LocalWork(steps=2, batch_size=None),
                   per_client_metrics=False)
    assert repr(vars(algo)) == repr(before)
    assert all(torch.equal(a, b) for a, b in zip(data, (blobs.x_all, blobs.y_all, blobs.weights)))
    again = fc.run(blobs, algo, rounds=3, lr=0.1, local=fc.LocalWork(steps=2, batch_size=None),
                   per_client_metrics=False)
    assert torch.equal(first.params, again.params)  # the object left nothing behind that changes the next run


def test_two_block_needs_a_clustering_task(lsq):
    with pytest.raises(fc.ConfigError, match="clustering or semi-supervised task"):
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


# ---------------------------------------------------------------- the semi-supervised form (pseudo-labels)
def _ssl_task(dtype=torch.float64, labelled=(True, False, True, False, False, True)):
    """3 clients of 2 rows, 3 classes; ``labelled`` marks the rows with one-hot targets (the others: zeros)."""
    from fedcompanion.tasks.semi_supervised import SOFT_LABELS

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(6, 4, generator=gen).numpy()
    truth = [0, 1, 2, 0, 1, 2]
    y = np.zeros((6, 3), dtype=np.float32)
    for j, (t, keep) in enumerate(zip(truth, labelled)):
        if keep:
            y[j, t] = 1.0
    clients = [(x[2 * i: 2 * i + 2], y[2 * i: 2 * i + 2]) for i in range(3)]
    return fc.tasks.from_client_arrays("ssl", clients, torch.nn.Linear(4, 3), SOFT_LABELS, dtype=dtype)


def test_soft_labels_loss_by_hand():
    from fedcompanion.tasks.semi_supervised import SOFT_LABELS

    out = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    expected = -math.log(math.exp(3) / (math.exp(1) + math.exp(2) + math.exp(3)))
    assert SOFT_LABELS.per_sample(out, y).tolist() == pytest.approx([expected, 0.0], abs=1e-15)
    assert SOFT_LABELS.correct(out, y)[0] == 1.0 and torch.isnan(SOFT_LABELS.correct(out, y)[1])
    assert SOFT_LABELS.evaluate(out, torch.tensor([2.0, 1.0])).tolist() == pytest.approx(
        [expected, math.log(3)], abs=1e-15)  # integer labels (a test set): the usual cross-entropy
    with pytest.raises(fc.ConfigError, match="simplex"):
        SOFT_LABELS.check_targets(torch.tensor([[0.5, 0.2, 0.0]]), "here")


def test_the_private_step_keeps_labels_and_projects_the_rest_by_hand():
    """Costs (1, 2, 4) with tau = 4 project to (0.625, 0.375, 0) (worked by hand in the sort-based projection);
    with tau = 1 to (1, 0, 0)."""
    assert assignments(torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64), 4.0).tolist() == [[0.625, 0.375, 0.0]]
    assert assignments(torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64), 1.0).tolist() == [[1.0, 0.0, 0.0]]
    from fedcompanion.algorithms.two_block import private_block

    task = _ssl_task()
    x = task.init_params(0)
    for i in range(3):
        inputs, stored = task.client_data(i)
        z = private_block(task, x, i, 0.5)
        keep = stored.sum(1) > 0
        assert torch.equal(z[keep], stored[keep])
        costs = -torch.log_softmax(task.forward(x, inputs), -1)
        assert torch.allclose(z[~keep], assignments(costs[~keep], 0.5), rtol=0, atol=1e-15)


def test_all_labelled_two_block_fedavg_is_fedavg_with_cross_entropy():
    """With every row labelled the private step keeps everything: two-block FedAvg on the soft labels is FedAvg on
    the integer labels (float64, to rounding)."""
    task = _ssl_task(labelled=(True,) * 6)
    hard = fc.tasks.from_client_arrays("hard", [(task.client_data(i)[0].numpy(),
                                                 task.client_data(i)[1].argmax(1).numpy()) for i in range(3)],
                                       torch.nn.Linear(4, 3), "cross_entropy", dtype=torch.float64)
    kw = dict(rounds=4, clients_per_round=2, seed=1, lr=0.3, local=fc.LocalWork(steps=3, batch_size=2),
              eval_every=4, per_client_metrics=False)
    soft = fc.run(task, fc.make("two_block", tau=0.5, inner="fedavg"), **kw).params
    assert torch.allclose(soft, fc.run(hard, fc.make("fedavg"), **kw).params, rtol=0, atol=1e-12)


def test_pseudo_labels_change_the_run_and_are_the_clients_own():
    task = _ssl_task()
    kw = dict(rounds=3, clients_per_round=3, seed=0, lr=0.3, local=fc.LocalWork(steps=2, batch_size=2),
              eval_every=3, per_client_metrics=False)
    with_block = fc.run(task, fc.make("two_block", tau=0.5, inner="fedvra"), **kw)
    alone = fc.run(task, fc.make("fedvra"), **kw)  # the unlabelled rows weigh nothing
    assert not torch.equal(with_block.params, alone.params)
    assert with_block.metric("uploaded_floats").equals(alone.metric("uploaded_floats"))  # pseudo-labels stay home


def test_semi_supervised_task_labels_a_fraction_of_every_client():
    task = fc.tasks.semi_supervised_task(num_clients=20, alpha=0.1, labelled_fraction=0.05, seed=3)
    labelled = task.y_all.sum(1) > 0
    assert bool((task.client_means(labelled.double()) > 0).all())
    assert bool((task.y_all[labelled].argmax(1) == task.labels[labelled]).all())
    assert abs(float(labelled.double().mean()) - 0.05) < 0.01
    with pytest.raises(fc.ConfigError, match="labelled_fraction"):
        fc.tasks.semi_supervised_task(num_clients=20, labelled_fraction=0.0)


def test_a_private_row_of_mass_m_is_the_minimiser_on_the_scaled_simplex():
    """min <c, z> + tau/2 ||z||^2 over z >= 0, sum z = m: z = m * assignments(c, tau * m); checked against random
    feasible points."""
    from fedcompanion.algorithms.two_block import private_block

    task = _ssl_task(labelled=(False,) * 6)
    x = task.init_params(1)
    z = private_block(task, x, 1, 0.2, 0.3)
    assert torch.allclose(z.sum(1), torch.full((2,), 0.3, dtype=torch.float64))
    c = -torch.log_softmax(task.forward(x, task.client_data(1)[0]), -1)
    value = lambda q: (q * c).sum(-1) + 0.1 * (q * q).sum(-1)  # noqa: E731  (tau / 2 = 0.1)
    others = 0.3 * torch.distributions.Dirichlet(torch.ones(3, dtype=torch.float64)).sample((2000, 2))
    assert (value(z) <= value(others).min(0).values + 1e-12).all()


def test_no_pseudo_labels_before_start_round():
    """Up to start_round the clients train on their stored targets: two_block with start_round beyond the run is
    the inner algorithm on the labelled rows alone, bit for bit."""
    task = _ssl_task()
    kw = dict(rounds=3, clients_per_round=3, seed=0, lr=0.3, local=fc.LocalWork(steps=2, batch_size=2),
              eval_every=3, per_client_metrics=False)
    late = fc.run(task, fc.make("two_block", tau=0.5, inner="fedavg", start_round=3), **kw)
    assert torch.equal(late.params, fc.run(task, fc.make("fedavg"), **kw).params)


def test_the_shipped_qsar_data_makes_a_semi_supervised_task():
    """Issue 47: QSAR's classes are stored as floats, and were used as indices (IndexError)."""
    task = fc.tasks.semi_supervised_task("qsar", num_clients=10, alpha=1.0, labelled_fraction=0.2, seed=0)
    labelled = task.y_all.sum(1) > 0
    assert task.labels.dtype == torch.int64 and set(task.labels.tolist()) == {0, 1}
    assert bool((task.y_all[labelled].argmax(1) == task.labels[labelled]).all())
    result = fc.run(task, fc.make("two_block", tau=0.5), rounds=2, clients_per_round=5, seed=0, lr=0.1,
                    local=fc.LocalWork(steps=2))
    assert result.status == "ok"
