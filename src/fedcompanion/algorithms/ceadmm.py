r"""The ADMM family of Zhou & Li, *Communication-efficient ADMM-based federated learning*.

Problem :math:`\min_x \sum_{i=1}^m w_i f_i(x)` with local copies :math:`x_i`, multipliers
:math:`\pi_i`, penalties :math:`\sigma_i > 0`, :math:`\sigma = \sum_i\sigma_i`, and

.. math::
    \mathcal{L}(x, X, \Pi) = \sum_i \Big[w_i f_i(x_i) + \langle\pi_i, x_i - x\rangle
                                       + \tfrac{\sigma_i}{2}\|x_i - x\|^2\Big].

Iteration k (communication only when :math:`k \in \{0, k_0, 2k_0, \dots\}`; in between the clients
keep :math:`y^{k+1} = x^{\tau_k + 1}`, :math:`\tau_k = \lfloor k/k_0\rfloor k_0`):

.. math::
    x^{\tau_k+1} &= \tfrac{1}{\sigma}\textstyle\sum_i(\sigma_i x_i^k + \pi_i^k)
        \quad\text{(clients upload } z_i = \sigma_i x_i + \pi_i)\\
    x_i^{k+1} &= \text{local update (below)}\\
    \pi_i^{k+1} &= \pi_i^k + \sigma_i\,(x_i^{k+1} - y^{k+1}).

Local updates:

* **exact** (Algorithm 2 with k0 = 1, **CEADMM** Algorithm 3): solve
  :math:`w_i\nabla f_i(x_i) + \pi_i^k + \sigma_i(x_i - y^{k+1}) = 0` (least squares: the system
  matrix is Cholesky-factored and inverted once, then each solve is one batched product;
  l2-logistic: batched Newton-CG to a gradient norm of ``tol_local``).
* **linearised at the server point** (H_i = 0, **LIADMM** Algorithm 4; with sigma_i = w_i/gamma):
  :math:`x_i^{k+1} = y^{k+1} - \gamma\nabla f_i(y^{k+1}) - \frac{\gamma}{w_i}\pi_i^k`.
  Without multipliers this is the paper's **FL** (Algorithm 1):
  :math:`x^{k+1} = \sum_i w_i x_i^k,\ x_i^{k+1} = x^{k+1} - \gamma\nabla f_i(x^{k+1})`.
* **linearised at the local point** with :math:`H_i = r_i I` (**ICEADMM** Algorithm 5):
  :math:`x_i^{k+1} = \big(w_i r_i x_i^k + \sigma_i y^{k+1} - w_i\nabla f_i(x_i^k) - \pi_i^k\big)/(w_i r_i + \sigma_i)`,
  one gradient step on the local objective with step size 1/(w_i r_i + sigma_i).

Penalties (the authors' code): :math:`\sigma_i = \frac{r_0}{\log(2 + k_0)}\log(m\,d_i)\,w_i r_i` with
:math:`r_i` the Lipschitz constant of :math:`\nabla f_i` and r0 = 0.1 (m > 20), 0.12 (10 < m <= 20),
0.15 (m <= 10). As in that code, every local copy is reset to y at each communication
(``reset_local``). Clients of different sizes are stored as padded blocks [m, d_max, n], so one
iteration of all clients is a handful of batched tensor operations.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import pandas as pd
import torch

from ..validation import ConfigError, check_choice, check_number
from .base import register

SOLVERS = ("exact", "linearized_server", "linearized_local")


def _bmv(matrices: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """Batched matrix-vector product: [m, p, q] x [m, q] -> [m, p]."""
    return torch.bmm(matrices, vectors.unsqueeze(-1)).squeeze(-1)


@dataclass
class ClientBlocks:
    """Every client's design matrix, padded: A [m, D, n], targets [m, D], mask [m, D], sizes [m]."""

    a: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    sizes: torch.Tensor
    weights: torch.Tensor
    l2: float
    loss: str

    @classmethod
    def from_task(cls, task) -> ClientBlocks:
        from ..tasks import linear_design

        design, targets, _ = linear_design(task)  # raises for non-convex models
        if task.loss not in ("squared", "logistic"):
            raise ConfigError(f"the ADMM family here needs a least-squares or logistic task, got {task.loss!r}")
        sizes = task.client_sizes
        m, d, n = len(sizes), int(sizes.max()), design.shape[1]
        a = torch.zeros(m, d, n, dtype=torch.float64)
        y = torch.zeros(m, d, dtype=torch.float64)
        mask = torch.zeros(m, d, dtype=torch.float64)
        for i in range(m):
            lo, hi = int(task.offsets[i]), int(task.offsets[i + 1])
            a[i, : hi - lo], y[i, : hi - lo], mask[i, : hi - lo] = design[lo:hi], targets[lo:hi], 1.0
        return cls(a, y, mask, sizes.double(), task.weights.double(), float(task.l2), task.loss)

    def _z(self, x):  # A_i x_i: [m, D]
        return _bmv(self.a, x)

    def _at(self, r):  # A_i^T r_i / d_i: [m, n]
        return _bmv(self.a.transpose(1, 2), r) / self.sizes[:, None]

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """f_i(x_i) for every client: [m]."""
        z = self._z(x)
        if self.loss == "squared":
            per = 0.5 * (z - self.y) ** 2
        else:
            per = torch.nn.functional.softplus(z) - self.y * z
        return (per * self.mask).sum(1) / self.sizes + 0.5 * self.l2 * (x * x).sum(1)

    def grads(self, x: torch.Tensor) -> torch.Tensor:
        """grad f_i(x_i) for every client: [m, n]."""
        if self.loss == "squared":  # H_i x_i - A_i^T b_i / d_i: one pass over [m, n, n], not two over A
            return _bmv(self.gram, x) - self.atb + self.l2 * x
        r = torch.sigmoid(self._z(x)) - self.y
        return self._at(r * self.mask) + self.l2 * x

    def hvp(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Hessian of the logistic f_i at x_i times v_i: [m, n] (Newton-CG; least squares solves directly)."""
        s = torch.sigmoid(self._z(x))
        return self._at(s * (1 - s) * self.mask * self._z(v)) + self.l2 * v

    @functools.cached_property
    def gram(self) -> torch.Tensor:
        """H_i = A_i^T A_i / d_i: [m, n, n]."""
        return torch.bmm(self.a.transpose(1, 2), self.a) / self.sizes[:, None, None]

    @functools.cached_property
    def atb(self) -> torch.Tensor:
        return self._at(self.y * self.mask)

    def lipschitz(self) -> torch.Tensor:
        """r_i: lambda_max(A_i^T A_i) / d_i (/4 for logistic) + l2."""
        top = torch.linalg.eigvalsh(self.gram)[:, -1]
        return (top / 4 if self.loss == "logistic" else top) + self.l2


def default_penalties(blocks: ClientBlocks, k0: int, r: torch.Tensor) -> torch.Tensor:
    """sigma_i = r0 / log(2 + k0) * log(m d_i) * w_i r_i (the authors' code)."""
    m = len(blocks.sizes)
    r0 = 0.1 if m > 20 else (0.12 if m > 10 else 0.15)
    return r0 / math.log(2 + k0) * torch.log(m * blocks.sizes) * blocks.weights * r


def batched_cg(matvec, rhs: torch.Tensor, tol: float, max_iter: int) -> torch.Tensor:
    """Conjugate gradients on m independent SPD systems at once (rows of ``rhs``).

    Written here because neither torch nor scipy offers a *batched* CG; scipy's ``cg`` would mean
    a Python loop over clients."""
    x = torch.zeros_like(rhs)
    r = rhs.clone()
    p = r.clone()
    rs = (r * r).sum(1)
    for _ in range(max_iter):
        live = rs.sqrt() > tol
        if not live.any():
            break
        ap = matvec(p)
        alpha = torch.where(live, rs / (p * ap).sum(1).clamp_min(1e-300), torch.zeros_like(rs))
        x += alpha[:, None] * p
        r -= alpha[:, None] * ap
        rs_new = (r * r).sum(1)
        p = r + torch.where(live, rs_new / rs.clamp_min(1e-300), torch.zeros_like(rs))[:, None] * p
        rs = rs_new
    return x


@dataclass
class ADMMResult:
    """history: tidy (iteration, metric, value); params: the server point y at the end."""

    history: pd.DataFrame
    params: torch.Tensor
    iterations: int
    status: str

    def metric(self, name: str) -> pd.Series:
        h = self.history
        return h[h.metric == name].set_index("iteration")["value"]


class ConsensusADMM:
    """The family above. Not an engine algorithm: it runs full-batch on convex tasks with its own
    vectorised solver, ``algorithm.solve(task, iterations)``."""

    name = "consensus_admm"
    solver = "exact"
    dual = True

    def __init__(self, k0: int = 1, sigma: float | list | None = None, gamma: float | None = None,
                 tol_local: float = 1e-10, reset_local: bool = True):
        self.k0 = check_number("k0", k0, low=1, integer=True)
        self.sigma = sigma
        self.gamma = None if gamma is None else check_number("gamma", gamma, low=0.0, low_open=True)
        self.tol_local = check_number("tol_local", tol_local, low=0.0, low_open=True)
        self.reset_local = reset_local
        check_choice("solver", self.solver, SOLVERS)

    def penalties(self, blocks: ClientBlocks, r: torch.Tensor) -> torch.Tensor:
        if self.gamma is not None:  # sigma_i = w_i / gamma (Algorithms 1, 2 and 4 of the paper)
            return blocks.weights / self.gamma
        if self.sigma is None:
            return default_penalties(blocks, self.k0, r)
        sigma = torch.as_tensor(self.sigma, dtype=torch.float64).expand(len(blocks.sizes)).clone()
        if (sigma <= 0).any():
            raise ConfigError(f"sigma must be > 0 for every client, got {self.sigma!r}")
        return sigma

    # ------------------------------------------------------------------ local updates
    def _exact(self, b: ClientBlocks, x, y, pi, sigma, cache):
        w = b.weights[:, None]
        if b.loss == "squared":  # (w_i (H_i + l2 I) + sigma_i I) x = w_i A_i^T b_i / d_i - pi_i + sigma_i y
            if "inverse" not in cache:  # factor once; then each solve is one batched product
                eye = torch.eye(b.gram.shape[-1], dtype=b.gram.dtype)
                system = w[:, :, None] * (b.gram + b.l2 * eye) + sigma[:, None, None] * eye
                cache["inverse"] = torch.cholesky_inverse(torch.linalg.cholesky(system))
            return _bmv(cache["inverse"], w * b.atb - pi + sigma[:, None] * y)
        for _ in range(50):  # Newton-CG on w_i f_i(x) + <pi_i, x> + sigma_i/2 ||x - y||^2
            g = w * b.grads(x) + pi + sigma[:, None] * (x - y)
            if g.norm(dim=1).max() <= self.tol_local:
                break
            step = batched_cg(lambda v, x=x: w * b.hvp(x, v) + sigma[:, None] * v, g, self.tol_local * 1e-2, 200)
            x = x - step
        return x

    def _local(self, b, x, y, pi, sigma, r, cache):
        if self.solver == "exact":
            return self._exact(b, x, y, pi, sigma, cache)
        w = b.weights[:, None]
        if self.solver == "linearized_server":  # y - (w_i grad f_i(y) + pi_i) / sigma_i
            y_all = y.expand_as(x)
            return y_all - (w * b.grads(y_all) + pi) / sigma[:, None]
        wr = (b.weights * r)[:, None]  # ICEADMM, H_i = r_i I
        return (wr * x + sigma[:, None] * y - w * b.grads(x) - pi) / (wr + sigma[:, None])

    # ------------------------------------------------------------------ the loop
    def solve(self, task, iterations: int = 1000, tol: float | None = None, record_every: int = 1,
              x0: torch.Tensor | None = None) -> ADMMResult:
        """Run up to ``iterations`` iterations; stop early once ||sum_i w_i grad f_i(x_i)||^2 < ``tol``."""
        check_number("iterations", iterations, low=1, integer=True)
        check_number("record_every", record_every, low=1, integer=True)
        b = ClientBlocks.from_task(task)
        m, n = len(b.sizes), b.a.shape[-1]
        r = b.lipschitz()
        sigma = self.penalties(b, r)
        x = torch.zeros(m, n, dtype=torch.float64) if x0 is None else x0.double().expand(m, n).clone()
        pi = torch.zeros_like(x)
        y = x[0].clone()
        cache: dict = {}
        rows: list[tuple] = []
        comm, status, start = 0, "max_iterations", time.process_time()
        test = task.test
        for k in range(iterations):
            if k % self.k0 == 0:  # communication: clients upload z_i = sigma_i x_i + pi_i
                y = (sigma[:, None] * x + pi).sum(0) / sigma.sum()
                comm += 1
                if self.reset_local:
                    x = y.expand(m, n).clone()
            x = self._local(b, x, y, pi, sigma, r, cache)
            if self.dual:
                pi = pi + sigma[:, None] * (x - y)
            if (k + 1) % record_every and k + 1 != iterations:
                continue
            f_x, g_x = b.values(x), b.grads(x)
            y_all = y.expand(m, n)
            f_y, g_y = b.weights @ b.values(y_all), b.weights @ b.grads(y_all)
            grad_sum_sq = float(((b.weights[:, None] * g_x).sum(0) ** 2).sum())
            lagrangian = b.weights @ f_x + (pi * (x - y)).sum() + 0.5 * (sigma * ((x - y) ** 2).sum(1)).sum()
            values = {"objective_y": float(f_y), "objective_X": float(b.weights @ f_x),
                      "lagrangian": float(lagrangian), "grad_sq_y": float((g_y**2).sum()),
                      "grad_sum_sq": grad_sum_sq, "comm_rounds": comm, "cpu_time": time.process_time() - start}
            if test is not None:
                values["test_accuracy"] = float(task.test_metrics(y.to(task.dtype))["test_accuracy"])
            rows.extend((k + 1, name, v) for name, v in values.items())
            if not math.isfinite(values["objective_y"]):
                status = "diverged"
                break
            if tol is not None and grad_sum_sq < tol:
                status = "converged"
                break
        history = pd.DataFrame(rows, columns=["iteration", "metric", "value"])
        return ADMMResult(history, y.to(task.dtype), k + 1, status)


@register
class FL(ConsensusADMM):
    """The paper's Algorithm 1: LIADMM without multipliers (sigma_i = w_i / gamma, k0 = 1)."""

    name, solver, dual = "fl", "linearized_server", False

    def __init__(self, gamma: float = 0.1):
        super().__init__(k0=1, gamma=gamma, reset_local=False)


@register
class ADMM(ConsensusADMM):
    """Algorithm 2: exact ADMM, communicating every iteration."""

    name = "admm"

    def __init__(self, sigma: float | list | None = None, gamma: float | None = None, tol_local: float = 1e-10):
        super().__init__(k0=1, sigma=sigma, gamma=gamma, tol_local=tol_local)


@register
class CEADMM(ConsensusADMM):
    """Algorithm 3: exact local solves, communication every k0 iterations."""

    name = "ceadmm"


@register
class LIADMM(ConsensusADMM):
    """Algorithm 4: linearised at the server point, sigma_i = w_i / gamma, k0 = 1."""

    name, solver = "liadmm", "linearized_server"

    def __init__(self, gamma: float = 0.1):
        super().__init__(k0=1, gamma=gamma, reset_local=False)


@register
class ICEADMM(ConsensusADMM):
    """Algorithm 5: one linearised step (H_i = r_i I) per iteration, communication every k0."""

    name, solver = "iceadmm", "linearized_local"
