r"""The per-sample losses of the three papers, in one place.

A loss knows four things about a model output ``out`` and a target ``y``:

* ``per_sample(out, y)``: the training loss :math:`\ell(out, y)` of each sample;
* ``evaluate(out, y)``: the loss reported by evaluation (the training loss, except for clustering);
* ``correct(out, y)``: 1 where the prediction is right (NaN where the task has no labels);
* ``check_targets(y)``: raise, naming the problem, on targets the loss cannot use (fractional class
  labels, logistic labels outside {0, 1}).

Losses of a *linear* predictor :math:`z = a^\top x` (least squares and logistic regression, the convex
tasks) also give the scalar function :math:`\phi(z, y)` with its first and second derivatives in z and a
bound on the second (its curvature), which is all that the convex optimum, the ADMM client blocks and their
Lipschitz constants need: :math:`\nabla_x \phi = \phi'(z)\,a`, :math:`\nabla_x^2\phi = \phi''(z)\,a a^\top
\preceq \bar\phi''\, a a^\top`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import Registry
from .validation import ConfigError


def output_gradient(z: torch.Tensor, y: torch.Tensor, w: torch.Tensor, kernel: str) -> torch.Tensor:
    r"""d (sum_j w_j loss_j) / d z for outputs z [..., B, C], targets y [..., B] and weights w [..., B], in closed form
    for the loss whose :attr:`Loss.kernel` is ``kernel``: softmax(z) - onehot(y) (``cross_entropy``),
    sigmoid(z) - y (``logistic``), z - y (``squared``), each times w. The one maths block behind
    :meth:`Loss.output_gradient` and the engines' fused kernels (TorchScript compiles it, so it takes the code, not
    the loss object)."""
    if kernel == "cross_entropy":
        g = torch.softmax(z, -1)
        target = y.unsqueeze(-1)
        g.scatter_add_(-1, target, torch.full_like(target, -1.0, dtype=g.dtype))
    elif kernel == "logistic":
        g = torch.sigmoid(z) - y.unsqueeze(-1)
    else:  # squared
        g = z - y.unsqueeze(-1)
    return g.mul_(w.unsqueeze(-1))


class Loss:
    """A per-sample loss with what evaluation, validation and the convex solvers need of it (module docstring)."""
    name = "loss"
    labelled = False  # predicts labels, so accuracy means something
    linear = False  # has phi, phi', phi'' of a linear predictor (see module docstring)
    quadratic = False  # phi'' is constant: one Newton step solves it
    kernel: str | None = None  # the closed form of :func:`output_gradient` (the engines' fused kernels need one)
    curvature_bound = float("nan")
    target_ndim = 1  # one target per row (clustering's are rows of assignments)
    private_block = False  # the targets are rows on the simplex the two-block algorithm sets (its private block)

    def per_sample(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The training loss of each sample, [n]."""
        raise NotImplementedError

    def evaluate(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss that evaluation reports for each sample (the training loss by default)."""
        return self.per_sample(out, y)

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """1.0 where the prediction is right, 0.0 where not, NaN where the task has no labels."""
        return torch.full(out.shape[:1], float("nan"), dtype=out.dtype, device=out.device)

    def costs(self, out: torch.Tensor) -> torch.Tensor:
        """What each row's private-block weights weigh, one cost per class [n, C] (the two-block algorithm's
        assignment step): by default the model's outputs themselves (clustering's squared distances)."""
        return out

    def output_gradient(self, z: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """d (sum_j w_j per_sample_j) / d z for outputs z [..., B, C], targets y (one per row of z) and weights w
        [..., B]: the closed form of :func:`output_gradient` where the loss declares a ``kernel``, else autograd."""
        if self.kernel is not None:
            return output_gradient(z, y, w, self.kernel)
        lead = z.shape[:-1]
        with torch.enable_grad():
            z = z.detach().requires_grad_(True)
            rows = self.per_sample(z.reshape(-1, z.shape[-1]), y.reshape(-1, *y.shape[len(lead):]))
            return torch.autograd.grad((w.reshape(-1) * rows).sum(), z)[0]

    def check_targets(self, y: torch.Tensor, where: str) -> None:
        """Raise a ConfigError, naming ``where``, on targets this loss cannot use."""
        if y.ndim != self.target_ndim:
            shape = "[n]" if self.target_ndim == 1 else f"{self.target_ndim} dimensions"
            raise ConfigError(f"{where}: {self.name} needs one target per row, shape {shape}; got {tuple(y.shape)}")
        if y.is_floating_point() and not torch.isfinite(y).all():
            raise ConfigError(f"{where}: targets contain NaN or inf")

    def check_outputs(self, out: torch.Tensor, y: torch.Tensor, where: str) -> None:
        """Raise, naming the problem, if the model's outputs ``out`` (of some rows) cannot score targets ``y``."""

    def target_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype the targets are stored in for features of ``dtype``."""
        return dtype

    # ---- linear predictors only: phi(z, y), phi'(z, y), phi''(z, y) elementwise
    def phi(self, z, y):
        """phi(z, y) of a linear predictor z = a^T x, elementwise."""
        raise NotImplementedError(f"{self.name} is not a loss of a linear predictor")

    def dphi(self, z, y):
        """phi'(z, y), the first derivative in z."""
        raise NotImplementedError(f"{self.name} is not a loss of a linear predictor")

    def d2phi(self, z, y):
        """phi''(z, y), the second derivative in z (at most ``curvature_bound``)."""
        raise NotImplementedError(f"{self.name} is not a loss of a linear predictor")

    def __repr__(self) -> str:
        return self.name


class CrossEntropy(Loss):
    """Softmax cross-entropy over C classes; integer labels in {0..C-1}."""

    name = kernel = "cross_entropy"
    labelled = True

    def per_sample(self, out, y):
        return F.cross_entropy(out, y, reduction="none")

    def correct(self, out, y):
        return (out.argmax(-1) == y).to(out.dtype)

    def target_dtype(self, dtype):
        return torch.long

    def check_targets(self, y, where):
        super().check_targets(y, where)
        if y.is_floating_point() and not torch.equal(y, y.round()):
            raise ConfigError(f"{where}: cross_entropy needs integer class labels, got fractional values "
                              f"such as {float(y[y != y.round()][0])}")
        if len(y) and int(y.min()) < 0:
            raise ConfigError(f"{where}: class labels must be >= 0, got {int(y.min())}")

    def check_outputs(self, out, y, where):
        if len(y) and int(y.max()) >= out.shape[-1]:
            raise ConfigError(f"{where}: labels up to {int(y.max())} but the model has {out.shape[-1]} outputs")


class Logistic(Loss):
    r"""Binary logistic loss :math:`\phi(z, y) = \log(1 + e^z) - y z`, y in {0, 1}; curvature <= 1/4."""

    name = kernel = "logistic"
    labelled = True
    linear = True
    curvature_bound = 0.25

    def per_sample(self, out, y):
        return F.binary_cross_entropy_with_logits(out.squeeze(-1), y, reduction="none")

    def correct(self, out, y):
        return ((out.squeeze(-1) > 0).to(out.dtype) == y).to(out.dtype)

    def check_targets(self, y, where):
        super().check_targets(y, where)
        if not ((y == 0) | (y == 1)).all():
            raise ConfigError(f"{where}: logistic labels must be 0 or 1")

    def phi(self, z, y):
        return F.softplus(z) - y * z

    def dphi(self, z, y):
        return torch.sigmoid(z) - y

    def d2phi(self, z, y):
        s = torch.sigmoid(z)
        return s * (1 - s)


class Squared(Loss):
    r"""Least squares :math:`\phi(z, y) = \tfrac12 (z - y)^2`; curvature 1."""

    name = kernel = "squared"
    linear = quadratic = True
    curvature_bound = 1.0

    def per_sample(self, out, y):
        return 0.5 * (out.squeeze(-1) - y) ** 2

    def phi(self, z, y):
        return 0.5 * (z - y) ** 2

    def dphi(self, z, y):
        return z - y

    def d2phi(self, z, y):
        return torch.ones_like(z)


class Cluster(Loss):
    r"""Clustering with soft assignments: ``out`` are the squared distances :math:`d_{c}` to the centroids,
    the target is an assignment row z on the simplex, :math:`\ell = \sum_c z_c d_c`. Evaluation reports the
    hard k-means loss :math:`\min_c d_c` (the targets are the algorithm's private block, not data)."""

    name = "cluster"
    target_ndim = 2
    private_block = True

    def per_sample(self, out, y):
        return (y * out).sum(-1)

    def evaluate(self, out, y):
        return out.min(-1).values


class SaturatingSquare:
    r"""The non-convex regulariser :math:`r(x) = \sum_j \frac{x_j^2}{1 + x_j^2}` (Reddi et al., 2016, and the
    non-convex optimisation literature after it), an l2 penalty that saturates at 1 per coordinate.

    Coordinate-wise :math:`r'(t) = \frac{2t}{(1+t^2)^2}` and :math:`r''(t) = \frac{2(1-3t^2)}{(1+t^2)^3}`, which
    lies in :math:`[-\tfrac12, 2]` (the minimum at :math:`|t| = 1`, the maximum at 0): the gradient is Lipschitz with
    constant 2 and the curvature goes down to -1/2, so :math:`\lambda r` added to a loss whose own curvature is
    below :math:`\lambda/2` in some direction makes the objective non-convex."""

    lipschitz = 2.0
    min_curvature = -0.5

    @staticmethod
    def value(x: torch.Tensor) -> torch.Tensor:
        """r(x) over the last dimension."""
        s = x * x
        return (s / (1 + s)).sum(-1)

    @staticmethod
    def grad(x: torch.Tensor) -> torch.Tensor:
        """r'(x_j), coordinate-wise."""
        return 2 * x / (1 + x * x) ** 2

    @staticmethod
    def curvature(x: torch.Tensor) -> torch.Tensor:
        """r''(x_j), coordinate-wise: the Hessian of r is diagonal."""
        s = x * x
        return 2 * (1 - 3 * s) / (1 + s) ** 3


SATURATING_SQUARE = SaturatingSquare()

def _check_loss(name: str, loss) -> Loss:
    if isinstance(loss, type) and issubclass(loss, Loss):  # a decorated class: its instance
        loss = loss()
    if not isinstance(loss, Loss):
        raise ConfigError(f"loss {name!r}: register a Loss (or a subclass of it), got {loss!r}")
    if loss.name != name:
        raise ConfigError(f"loss {name!r}: the loss's name attribute must be the name it is registered under, "
                          f"got {loss.name!r}")
    return loss


LOSSES = Registry("loss", _check_loss)


def register_loss(name: str, loss: Loss | type | None = None):
    """Make ``loss=name`` (a task builder's, :func:`~fedcompanion.tasks.from_client_arrays`'s) use ``loss``, an
    instance or subclass of :class:`Loss` whose ``name`` is ``name`` (a class decorator without ``loss``). A task
    keys its runs by its loss's code where the loss is a user's (:func:`~fedcompanion.tasks.core.task_digest`)."""
    return LOSSES.register(name, loss)


for _loss in (CrossEntropy, Logistic, Squared, Cluster):
    register_loss(_loss.name, _loss)


def get_loss(name: str) -> Loss:
    """The loss registered as ``name``: cross_entropy, logistic, squared, cluster, soft_labels or a user's."""
    return LOSSES.lookup(name)
