"""Tasks: losses, per-client evaluation and the optimum of convex tasks."""
import pytest
import torch

import fedcompanion as fc
from fedcompanion.losses import LOSSES


def test_per_client_pass_matches_client_losses_and_accuracies():
    """The chunked one-pass evaluation against each client's loss and accuracy computed on its own (float64)."""
    task = fc.tasks.federated_dataset_task("mnist", 12, "dirichlet", "mlp", seed=0, alpha=0.5, hidden=(16,),
                                           dtype=torch.float64)
    x = task.init_params(3)
    losses, accs = task.evaluate_clients(x, chunk=1000)  # chunks that straddle client boundaries
    for i in range(task.num_clients):
        inputs, targets = task.client_data(i)
        assert abs(float(losses[i] - task.client_loss(i, x))) < 1e-12
        assert float(accs[i]) == float((task.forward(x, inputs).argmax(1) == targets).double().mean())
    assert abs(task.global_loss(x) - float(task.weights @ losses)) < 1e-12


def test_least_squares_optimum_is_stationary(lsq_sized):
    x_star, f_star = lsq_sized.optimum
    grad = sum(float(w) * lsq_sized.client_grad(i, x_star) for i, w in enumerate(lsq_sized.weights))
    assert grad.norm() < 1e-12
    assert f_star < lsq_sized.global_loss(x_star + 1e-3)


def test_logistic_optimum_is_stationary():
    task = fc.tasks.qsar_logistic_task(num_clients=4, mu=1e-2, seed=0)
    x_star, _ = task.optimum
    grad = sum(float(w) * task.client_grad(i, x_star) for i, w in enumerate(task.weights))
    assert grad.norm() < 1e-10


def test_init_is_seeded_and_leaves_global_rng_alone(small_mnist):
    state = torch.random.get_rng_state()
    a, b, c = small_mnist.init_params(1), small_mnist.init_params(1), small_mnist.init_params(2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(state, torch.random.get_rng_state())


def test_models_build_for_their_data():
    from fedcompanion.models import make_model

    assert make_model("cnn", 784, 10)(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert make_model("cifar_cnn", 3072, 10)(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert make_model("mlp", 784, 10, hidden=(128, 64))(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_client_value_and_grad_gives_torch_funcs_bits(small_mnist):
    """One autograd pass gives exactly torch.func.grad_and_value's loss and gradient (float32 MLP, all rows or some)."""
    x = small_mnist.init_params(1)
    for i, rows in ((0, None), (5, torch.tensor([4, 0, 9, 2]))):
        value, grad = small_mnist.client_value_and_grad(i, x, rows)
        inputs, targets = small_mnist.client_data(i)
        if rows is not None:
            inputs, targets = inputs[rows], targets[rows]
        l2 = float(small_mnist.client_l2[i])
        expected_grad, expected = torch.func.grad_and_value(small_mnist.loss_fn)(x, inputs, targets, l2)
        assert torch.equal(value, expected) and torch.equal(grad, expected_grad) and not value.requires_grad


def test_a_task_is_frozen_and_replace_makes_a_checked_copy(lsq):
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        lsq.l2 = 1.0
    other = dataclasses.replace(lsq, l2=0.5)
    assert lsq.l2 == 0.0 and other.l2 == 0.5 and other.x_all is lsq.x_all
    with pytest.raises(fc.ConfigError, match="l2"):
        dataclasses.replace(lsq, l2=-1.0)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_loss_gives_its_output_gradient_as_autograd_does(name):
    """The closed forms the fused kernels use (and autograd for a loss without one) against autograd of
    sum_j w_j loss_j, on a batch of 3 clients' 5 rows. A wrong closed form (softmax without the one-hot, sigmoid
    without y, a missing weight) fails it."""
    loss = LOSSES[name]
    g = torch.Generator().manual_seed(0)
    classes = 4 if name in ("cross_entropy", "cluster", "soft_labels") else 1
    z = torch.randn(3, 5, classes, dtype=torch.float64, generator=g)
    y = {"cross_entropy": torch.randint(0, classes, (3, 5), generator=g),
         "logistic": torch.randint(0, 2, (3, 5), generator=g).double(),
         "squared": torch.randn(3, 5, dtype=torch.float64, generator=g),
         "cluster": torch.softmax(torch.randn(3, 5, classes, dtype=torch.float64, generator=g), -1),
         "soft_labels": torch.softmax(torch.randn(3, 5, classes, dtype=torch.float64, generator=g), -1)}[name]
    w = torch.rand(3, 5, dtype=torch.float64, generator=g)
    leaf = z.clone().requires_grad_(True)
    rows = loss.per_sample(leaf.reshape(15, classes), y.reshape(15, *y.shape[2:]))
    expected = torch.autograd.grad((w.reshape(-1) * rows).sum(), leaf)[0]
    assert torch.allclose(loss.output_gradient(z.clone(), y, w), expected, rtol=1e-12, atol=1e-14)
    assert (loss.kernel is not None) == (name not in ("cluster", "soft_labels"))  # the three losses of the papers
