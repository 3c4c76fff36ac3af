r"""A convex task's linear view: its design matrix (:func:`linear_design`), its optimum (:func:`convex_optimum`) and
the ADMM family's data, every client's design matrix as one zero-padded block, so that one iteration of all
clients (:mod:`fedcompanion.algorithms.ceadmm`, which reaches them as ``task.client_blocks()``) is a handful of
batched tensor operations.

Client i's term is :math:`f_i(x) = \frac{1}{d_i}\sum_{j} \phi(a_{ij}^\top x, b_{ij}) + \frac{\mu_i}{2}\|x\|^2
+ \lambda\, r(x)` for a linear-predictor loss phi and the task's non-convex regulariser
:math:`r(x) = \sum_k x_k^2/(1 + x_k^2)` (weight :math:`\lambda \ge 0`, usually 0); the blocks give :math:`f_i`,
:math:`\nabla f_i`, Hessian-vector products and the Lipschitz constants :math:`r_i` of every client at once,
and :func:`~fedcompanion.linalg.batched_cg` solves m SPD systems together.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from ..linalg import bmv
from ..losses import SATURATING_SQUARE


def linear_design(task) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A task's (:class:`~fedcompanion.tasks.core.Task`) rows of the design matrix (with a bias column if the model
    has one), targets, and per-row weight w_i / n_i; float64 on the task's device."""
    layers = [m for m in task.model.modules() if isinstance(m, nn.Linear)]
    if len(layers) != 1 or layers[0].out_features != 1 or not task.loss.linear:
        raise NotImplementedError(f"task {task.name!r} is not convex (this needs a linear model with a "
                                  "least-squares or logistic loss)")
    a = task.x_all.reshape(len(task.x_all), -1).double()
    if layers[0].bias is not None:
        a = torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype, device=a.device)], dim=1)
    row_w = torch.repeat_interleave(task.weights.double() / task.client_sizes.double(), task.client_sizes)
    return a, task.y_all.double(), row_w.to(a.device)


def convex_optimum(task, tol: float = 1e-13, max_iter: int = 100) -> tuple[torch.Tensor, float]:
    """A task's (:class:`~fedcompanion.tasks.core.Task`) optimum, by Newton's method on
    F(x) = sum_j c_j phi(a_j^T x, y_j) + sum_i w_i mu_i/2 ||x||^2 (one step for least squares, where phi is quadratic).
    The task comes as an argument, never imported: ``tasks/core.py`` imports this module (lazily), not the reverse."""
    a, y, row_w = linear_design(task)
    mu = float(task.weights.double() @ task.client_l2)  # sum_i w_i mu_i
    eye = torch.eye(a.shape[1], dtype=a.dtype, device=a.device)
    x = torch.zeros(a.shape[1], dtype=a.dtype, device=a.device)
    for _ in range(1 if task.loss.quadratic else max_iter):
        z = a @ x
        grad = a.T @ (row_w * task.loss.dphi(z, y)) + mu * x
        hess = a.T @ ((row_w * task.loss.d2phi(z, y))[:, None] * a) + mu * eye
        x = x - torch.linalg.solve(hess, grad)
        if grad.norm() < tol:
            break
    x_star = x.to(task.dtype)
    return x_star, task.global_loss(x_star)


SPARSE_BELOW = 0.3  # design matrices with fewer nonzeros than this share are multiplied as sparse matrices


@dataclass
class ClientBlocks:
    """Every client's design matrix, zero-padded: A [m, D, n], targets [m, D], mask [m, D], sizes d_i [m],
    weights w_i [m], l2 mu_i [m], the loss (a linear-predictor :class:`~fedcompanion.losses.Loss`) and the weight
    lambda of the non-convex regulariser (``nonconvex``).

    A sparse design (QSAR's fingerprints: 9% nonzero) is also kept as one block-diagonal CSR matrix
    [m D, m n] and its transpose, so that A_i x_i and A_i^T r_i of all clients are one sparse product each."""

    a: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    sizes: torch.Tensor
    weights: torch.Tensor
    l2: torch.Tensor
    loss: object
    sparse: tuple | None = None
    nonconvex: float = 0.0

    @classmethod
    def from_task(cls, task) -> ClientBlocks:
        """The blocks of a convex task with a linear model: each client's design and targets padded to one [m, d, n]
        block (raises for a non-linear model)."""
        design, targets, _ = linear_design(task)  # raises for non-convex models
        sizes = task.client_sizes
        m, d, n = len(sizes), int(sizes.max()), design.shape[1]
        opts = dict(dtype=torch.float64, device=design.device)
        a, y, mask = torch.zeros(m, d, n, **opts), torch.zeros(m, d, **opts), torch.zeros(m, d, **opts)
        for i in range(m):
            lo, hi = int(task.offsets[i]), int(task.offsets[i + 1])
            a[i, : hi - lo], y[i, : hi - lo], mask[i, : hi - lo] = design[lo:hi], targets[lo:hi], 1.0
        sparse = block_diagonal(a) if float((a != 0).sum()) < SPARSE_BELOW * mask.sum() * n else None
        return cls(a, y, mask, sizes.to(**opts), task.weights.to(**opts), task.client_l2.to(**opts), task.loss,
                   sparse, task.nonconvex)

    def select(self, clients: list[int]) -> ClientBlocks:
        """The blocks of clients ``clients`` only (``self`` if they are all m, in order)."""
        if clients == list(range(len(self.sizes))):
            return self
        a = self.a[clients]
        return ClientBlocks(a, self.y[clients], self.mask[clients], self.sizes[clients], self.weights[clients],
                            self.l2[clients], self.loss, None if self.sparse is None else block_diagonal(a),
                            self.nonconvex)

    @functools.cached_property
    def regularised(self) -> bool:
        """Whether some client has mu_i != 0."""
        return bool((self.l2 != 0).any())

    @property
    def uses_gram(self) -> bool:
        """Least squares with n <= d_max: values and gradients from H_i = A_i^T A_i / d_i, one pass over
        [m, n, n] instead of two over [m, D, n]."""
        return self.loss.quadratic and self.a.shape[2] <= self.a.shape[1]

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """A_i x_i: [m, D] (zero on padding rows)."""
        if self.sparse is not None:
            return (self.sparse[0] @ x.reshape(-1)).view(self.y.shape)
        return bmv(self.a, x)

    def _at(self, r: torch.Tensor) -> torch.Tensor:
        """A_i^T r_i / d_i: [m, n] (padding rows of A are zero, so padded entries of r do not count)."""
        if self.sparse is not None:
            return (self.sparse[1] @ r.reshape(-1)).view(len(self.sizes), -1) / self.sizes[:, None]
        return bmv(self.a_transposed, r) / self.sizes[:, None]

    @functools.cached_property
    def a_transposed(self) -> torch.Tensor:
        """A_i^T, contiguous [m, n, D] (a product with the transposed view is three times slower)."""
        return self.a.transpose(1, 2).contiguous()

    def evaluate(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f_i(x_i) [m], grad f_i(x_i) [m, n]), the non-convex regulariser included.

        Least squares with ``uses_gram``: with x^_i a minimiser of client i's data term (``anchor``) and
        f^_i its value (``floor``), e = x - x^_i gives grad = H_i e and f = f^_i + e'H_i e / 2 exactly, so one
        pass over H_i yields both, and no digits are lost to cancellation near the optimum."""
        reg = 0.5 * self.l2 * (x * x).sum(1)
        if self.uses_gram:
            e = x - self.anchor
            he = bmv(self.gram, e)
            value, grad = self.floor + 0.5 * (e * he).sum(1) + reg, he + self.l2[:, None] * x
        else:
            z = self.predict(x)
            value = (self.loss.phi(z, self.y) * self.mask).sum(1) / self.sizes + reg
            grad = self._at(self.loss.dphi(z, self.y)) + self.l2[:, None] * x
        if self.nonconvex:
            value = value + self.nonconvex * SATURATING_SQUARE.value(x)
            grad = grad + self.nonconvex * SATURATING_SQUARE.grad(x)
        return value, grad

    @functools.cached_property
    def anchor(self) -> torch.Tensor:
        """x^_i: the minimum-norm least-squares solution of A_i x = b_i, [m, n]."""
        return torch.linalg.lstsq(self.a, self.y.unsqueeze(-1), driver="gelsd" if self.a.device.type == "cpu"
                                  else None).solution.squeeze(-1)

    @functools.cached_property
    def floor(self) -> torch.Tensor:
        """f^_i = ||A_i x^_i - b_i||^2 / (2 d_i), [m]."""
        residual = (self.predict(self.anchor) - self.y) * self.mask
        return 0.5 * (residual * residual).sum(1) / self.sizes

    def hvp(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Hessian of f_i at x_i times v_i: [m, n]."""
        out = self._at(self.loss.d2phi(self.predict(x), self.y) * self.predict(v)) + self.l2[:, None] * v
        if self.nonconvex:
            out = out + self.nonconvex * SATURATING_SQUARE.curvature(x) * v
        return out

    @functools.cached_property
    def gram(self) -> torch.Tensor:
        """H_i = A_i^T A_i / d_i: [m, n, n] (least squares only)."""
        return torch.bmm(self.a.transpose(1, 2), self.a) / self.sizes[:, None, None]

    @functools.cached_property
    def atb(self) -> torch.Tensor:
        """A_i^T b_i / d_i: [m, n]."""
        return self._at(self.y)

    def lipschitz(self) -> torch.Tensor:
        """r_i = curvature bound * lambda_max(A_i^T A_i) / d_i + mu_i + 2 lambda, from the smaller Gram side
        (A_i A_i^T is d_i x d_i, A_i^T A_i is n x n; both have the same largest eigenvalue; 2 lambda bounds the
        non-convex regulariser's curvature). Computed from A alone, whatever else has been computed (the same bits
        however the blocks were used before)."""
        m, d, n = self.a.shape
        if n <= d:
            gram = torch.bmm(self.a.transpose(1, 2), self.a)
        else:
            gram = torch.bmm(self.a, self.a.transpose(1, 2))  # padding rows add zero eigenvalues only
        top = torch.linalg.eigvalsh(gram)[:, -1] / self.sizes
        r = self.loss.curvature_bound * top + self.l2
        return r + SATURATING_SQUARE.lipschitz * self.nonconvex if self.nonconvex else r


def block_diagonal(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The block-diagonal CSR matrix diag(A_1, ..., A_m) [m D, m n] and its transpose, from padded [m, D, n]."""
    import warnings

    m, d, n = a.shape
    client, row, col = a.nonzero(as_tuple=True)
    values = a[client, row, col]
    rows, cols = client * d + row, client * n + col
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "sparse CSR support is in beta state"
        forward = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, (m * d, m * n)).coalesce()
        backward = torch.sparse_coo_tensor(torch.stack([cols, rows]), values, (m * n, m * d)).coalesce()
        return forward.to_sparse_csr(), backward.to_sparse_csr()
