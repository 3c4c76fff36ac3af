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
  ``local_solver='cg'``: what the authors' code does (``my_cg`` in ICEADMM4LinearReg.m), one Newton step
  :math:`x_i^{k+1} = x_i^k - s` with :math:`(w_iH_i + \sigma_i I)s = g_i`, :math:`g_i = w_i\nabla f_i(x_i^k) +
  \pi_i^k + \sigma_i(x_i^k - y^{k+1})`, s by conjugate gradients from zero, at most 50 iterations, stopping once the
  squared residual is below 1e-8 of :math:`\|g_i\|^2` (a residual of 1e-4 of the gradient's norm: an inexact
  solve whose error shrinks with the gradient); ``local_solver='cg_warm'``: the exact solve to a residual of 1e-8
  of the system's right-hand side's norm, by CG started from the client's iterate :math:`x_i^k` (y after a reset),
  at most 50 iterations;
  l2-logistic, or a task with the non-convex regulariser: batched Newton-CG to a gradient norm of ``tol_local``,
  each Newton step halved until the local objective decreases; the local objective must be strongly convex,
  :math:`\sigma_i > w_i\lambda/2` for the regulariser's weight :math:`\lambda`, else the run is refused).
* **linearised at the server point** (H_i = 0, **LIADMM** Algorithm 4; with sigma_i = w_i/gamma):
  :math:`x_i^{k+1} = y^{k+1} - \gamma\nabla f_i(y^{k+1}) - \frac{\gamma}{w_i}\pi_i^k`.
  Without multipliers this is the paper's **FL** (Algorithm 1):
  :math:`x^{k+1} = \sum_i w_i x_i^k,\ x_i^{k+1} = x^{k+1} - \gamma\nabla f_i(x^{k+1})`.
* **linearised at the local point** with :math:`H_i = r_i I` (**ICEADMM** Algorithm 5):
  :math:`x_i^{k+1} = \big(w_i r_i x_i^k + \sigma_i y^{k+1} - w_i\nabla f_i(x_i^k) - \pi_i^k\big)/(w_i r_i + \sigma_i)`,
  one gradient step on the local objective with step size 1/(w_i r_i + sigma_i). With
  ``curvature='gram'``, :math:`H_i = A_i^\top A_i / (d_i\, r)` (r = ``gram_r`` = 6), what the authors' code
  uses for logistic regression (ICEADMM4LogistReg.m): then
  :math:`(w_i H_i + \sigma_i I)(x_i^{k+1} - x_i^k) = \sigma_i(y^{k+1} - x_i^k) - w_i\nabla f_i(x_i^k) - \pi_i^k`
  is solved exactly (Woodbury, through the d_i x d_i matrix :math:`A_i A_i^\top`); the authors' code solves it
  approximately, by conjugate gradients from zero (at most 50 iterations, squared residual below 1e-8 of the
  right-hand side's).

Penalties (the authors' code): :math:`\sigma_i = \frac{r_0}{\log(2 + k_0)}\log(m\,d_i)\,w_i r_i` with
:math:`r_i` the Lipschitz constant of :math:`\nabla f_i` and r0 = 0.1 (m > 20), 0.12 (10 < m <= 20),
0.15 (m <= 10). As in that code, every local copy is reset to y at each communication
(``reset_local``), and the run stops once :math:`\|\nabla f(y)\|^2` (evaluated when y changes) falls below
``tol``. Clients of different sizes are stored as padded blocks [m, d_max, n], so one iteration of all clients
is a handful of batched tensor operations; every quantity is computed once per iteration and shared by the
step and the recorded metrics (:math:`f(y)` only when y changes).

Nothing here needs convexity: a task with the non-convex regulariser (``Task.nonconvex``) runs like any other,
which is what Theorems 3.1-3.3 are about. ``init_scale`` > 0 starts from :math:`x^0 \sim` ``init_scale`` N(0, I)
drawn with the run's seed (default: zeros, the authors' start).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..linalg import batched_cg, bmv
from ..protocol import Watch
from ..validation import ConfigError, check_choice, check_number
from .base import FullBatch, register

Blocks = Any  # a task's ClientBlocks (``task.client_blocks()``, :mod:`fedcompanion.tasks.convex`): duck-typed here, so
# that the algorithms never import the tasks

SOLVERS = ("exact", "linearized_server", "linearized_local")
CURVATURES = ("lipschitz", "gram")
# CEADMM's least-squares solve: a factor cached once, the authors' CG on the Newton step, or CG from x_i^k to 1e-8
LOCAL_SOLVERS = ("factored", "cg", "cg_warm")


def default_penalties(blocks: Blocks, k0: int, r: torch.Tensor) -> torch.Tensor:
    """sigma_i = r0 / log(2 + k0) * log(m d_i) * w_i r_i (the authors' code)."""
    m = len(blocks.sizes)
    r0 = 0.1 if m > 20 else (0.12 if m > 10 else 0.15)
    return r0 / math.log(2 + k0) * torch.log(m * blocks.sizes) * blocks.weights * r


METRICS = ("objective_y", "objective_X", "lagrangian", "grad_sq_y", "step_sq", "comm_rounds", "test_accuracy")


@dataclass(frozen=True)
class ADMMState:
    """A run of the family between two iterations (a new one each iteration; ``cache`` holds the factors of the
    local solves, computed in the first iteration that needs them and shared from then on)."""

    task: Any
    blocks: Blocks
    r: torch.Tensor  # the Lipschitz constants r_i
    sigma: torch.Tensor  # the penalties sigma_i
    x: torch.Tensor  # the local copies x_i, [m, n]
    pi: torch.Tensor  # the multipliers pi_i, [m, n]
    y: torch.Tensor | None  # the server point (None before the first communication)
    grad_x: torch.Tensor  # grad f_i(x_i), what ICEADMM's next step linearises at
    f_x: torch.Tensor | None = None  # f_i(x_i) where the step computed it
    before: tuple = (None, None, None)  # (x, pi, y) before the last iteration
    comm: int = 0  # communications so far
    f_y: float = math.nan
    grad_sq_y: float = math.nan
    cache: dict = field(default_factory=dict)


class ConsensusADMM(FullBatch):
    """The family above: full-batch, every client in every iteration, on the driver's loop
    (``fc.run(task, fc.make("iceadmm", k0=10), rounds=...)``, a round being one iteration)."""

    name = "consensus_admm"
    solver = "exact"
    dual = True
    local_solver = "factored"

    def __init__(self, k0: int = 1, sigma: float | list | None = None, gamma: float | None = None,
                 tol_local: float = 1e-10, reset_local: bool = True, curvature: str = "lipschitz",
                 gram_r: float = 6.0, init_scale: float = 0.0):
        self.k0 = check_number("k0", k0, low=1, integer=True)
        if sigma is not None and gamma is not None:
            raise ConfigError("give sigma or gamma (sigma_i = w_i / gamma), not both")
        if isinstance(sigma, (list, tuple)):
            self.sigma = [check_number("sigma", s, low=0.0, low_open=True) for s in sigma]
        else:
            self.sigma = None if sigma is None else check_number("sigma", sigma, low=0.0, low_open=True)
        self.gamma = None if gamma is None else check_number("gamma", gamma, low=0.0, low_open=True)
        self.tol_local = check_number("tol_local", tol_local, low=0.0, low_open=True)
        if not isinstance(reset_local, bool):
            raise ConfigError(f"reset_local must be True or False, got {reset_local!r}")
        self.reset_local = reset_local
        self.curvature = check_choice("curvature", curvature, CURVATURES)
        if curvature == "gram" and self.solver != "linearized_local":
            raise ConfigError(f"curvature='gram' applies to ICEADMM's linearised step only, not to {self.name}")
        self.gram_r = check_number("gram_r", gram_r, low=0.0, low_open=True)
        self.init_scale = check_number("init_scale", init_scale, low=0.0)

    def penalties(self, blocks: Blocks, r: torch.Tensor) -> torch.Tensor:
        """sigma_i for every client: w_i / gamma if gamma is given, else the given sigma, else the paper's default from
        the Lipschitz constants r."""
        if self.gamma is not None:  # sigma_i = w_i / gamma (Algorithms 1, 2 and 4 of the paper)
            return blocks.weights / self.gamma
        if self.sigma is None:
            return default_penalties(blocks, self.k0, r)
        m = len(blocks.sizes)
        if isinstance(self.sigma, list) and len(self.sigma) != m:
            raise ConfigError(f"sigma has {len(self.sigma)} values but the task has {m} clients")
        return torch.as_tensor(self.sigma, dtype=torch.float64, device=r.device).expand(m).clone()

    # ------------------------------------------------------------------ local updates
    def _exact(self, b: Blocks, x, y, pi, sigma, cache):
        w = b.weights[:, None]
        quadratic = b.loss.quadratic and not b.nonconvex
        if quadratic and self.local_solver != "factored":
            def hessian(v):  # (w_i H_i + sigma_i I) v
                return w * b.hvp(x, v) + sigma[:, None] * v

            if self.local_solver == "cg":  # the authors' code: the Newton step s by CG from zero
                g = w * b.evaluate(x)[1] + pi + sigma[:, None] * (x - y)
                return x - batched_cg(hessian, g, 1e-4 * g.norm(dim=1), 50)
            rhs = w * b.atb - pi + sigma[:, None] * y  # cg_warm: the solve to 1e-8, CG from x_i^k
            return batched_cg(hessian, rhs, 1e-8 * rhs.norm(dim=1), 50, start=x)
        if quadratic:  # (w_i (H_i + mu_i I) + sigma_i I) x = w_i A_i^T b_i / d_i - pi_i + sigma_i y
            if "inverse" not in cache:  # factor once; then each solve is one batched product
                eye = torch.eye(b.a.shape[-1], dtype=b.a.dtype, device=b.a.device)
                system = w[:, :, None] * (b.gram + b.l2[:, None, None] * eye) + sigma[:, None, None] * eye
                cache["inverse"] = torch.cholesky_inverse(torch.linalg.cholesky(system))
            return bmv(cache["inverse"], w * b.atb - pi + sigma[:, None] * y)
        def local(x):  # (w_i f_i(x) + <pi_i, x> + sigma_i/2 ||x - y||^2, its gradient)
            f, g = b.evaluate(x)
            value = w[:, 0] * f + (pi * x).sum(1) + 0.5 * sigma * ((x - y) ** 2).sum(1)
            return value, w * g + pi + sigma[:, None] * (x - y)

        value, g = local(x)
        for _ in range(50):  # Newton-CG, each client's step halved until its local objective decreases
            if g.norm(dim=1).max() <= self.tol_local:
                break
            step = batched_cg(lambda v, x=x: w * b.hvp(x, v) + sigma[:, None] * v, g, self.tol_local * 1e-2, 200)
            t = torch.ones_like(value)
            for _ in range(30):
                trial_value, trial_g = local(x - t[:, None] * step)
                worse = ~(trial_value <= value + 1e-12 * value.abs())  # (rounding is no increase; NaN is)
                if not worse.any():
                    break
                t = torch.where(worse, 0.5 * t, t)
            x, value, g = x - t[:, None] * step, trial_value, trial_g
        return x

    def _local(self, b, x, y, pi, sigma, r, grad_x, cache):
        """x_i^{k+1}; ``grad_x`` is grad f_i(x_i^k) (the linearised-local step needs it)."""
        if self.solver == "exact":
            return self._exact(b, x, y, pi, sigma, cache)
        w = b.weights[:, None]
        if self.solver == "linearized_server":  # y - (w_i grad f_i(y) + pi_i) / sigma_i
            y_all = y.expand_as(x)
            return y_all - (w * b.evaluate(y_all)[1] + pi) / sigma[:, None]
        rhs = sigma[:, None] * (y - x) - w * grad_x - pi  # ICEADMM
        if self.curvature == "lipschitz":  # H_i = r_i I
            return x + rhs / (w * r[:, None] + sigma[:, None])
        # H_i = A_i^T A_i / (d_i r): (sigma I + c A^T A)^-1 = (I - c A^T (sigma I + c A A^T)^-1 A) / sigma,
        # with c = w_i / (d_i r) and the small d_i x d_i inverse factored once (Woodbury)
        if "woodbury" not in cache:
            c = b.weights / (b.sizes * self.gram_r)
            eye = torch.eye(b.a.shape[1], dtype=b.a.dtype, device=b.a.device)
            inner = sigma[:, None, None] * eye + c[:, None, None] * torch.bmm(b.a, b.a_transposed)
            cache["woodbury"] = (c, torch.cholesky_inverse(torch.linalg.cholesky(inner)))
        c, inner_inverse = cache["woodbury"]
        correction = b._at(bmv(inner_inverse, b.predict(rhs))) * b.sizes[:, None]  # A^T M A rhs
        return x + (rhs - c[:, None] * correction) / sigma[:, None]

    def _evaluate_local(self, b: Blocks, x: torch.Tensor, pi: torch.Tensor):
        """(f_i(x_i^{k+1}), grad f_i(x_i^{k+1})). After an exact least-squares step the optimality condition
        w_i grad f_i(x_i^{k+1}) + pi_i^{k+1} = 0 gives the gradient for free, and with it the value
        f_i = f^_i + e'(grad - mu_i x)/2 + mu_i ||x||^2/2, e = x - x^_i (see ``ClientBlocks.evaluate``)."""
        if not (self.solver == "exact" and self.dual and b.uses_gram and not b.nonconvex):
            return b.evaluate(x)
        grad = -pi / b.weights[:, None]
        e = x - b.anchor
        if not b.regularised:  # mu_i = 0: the same numbers without the terms that vanish
            return b.floor + 0.5 * (e * grad).sum(1), grad
        reg = b.l2[:, None] * x
        return b.floor + 0.5 * (e * (grad - reg)).sum(1) + 0.5 * (reg * x).sum(1), grad

    # ------------------------------------------------------------------ iterations on the driver's loop
    def start(self, task, init: torch.Tensor | None = None, seed: int = 0) -> ADMMState:
        """The state before iteration 0: every local copy at ``init`` (default zeros, or ``init_scale`` N(0, I) drawn
        with ``seed``), multipliers zero, the penalties of :meth:`penalties`."""
        try:
            b = task.client_blocks()
        except NotImplementedError as exc:
            raise ConfigError(f"{self.name} needs a linear model with a least-squares or logistic loss: {exc}") \
                from None
        m, n = len(b.sizes), b.a.shape[-1]
        r = b.lipschitz()
        sigma = self.penalties(b, r)
        if self.solver == "exact" and b.nonconvex and bool((sigma <= b.weights * b.nonconvex / 2).any()):
            raise ConfigError(f"{self.name}'s local objective is not convex: with nonconvex={b.nonconvex} every "
                              f"sigma_i must exceed w_i * nonconvex / 2 (smallest sigma_i / w_i: "
                              f"{float((sigma / b.weights).min()):.3g})")
        if init is None and self.init_scale:
            generator = torch.Generator().manual_seed(seed)
            init = self.init_scale * torch.randn(n, dtype=torch.float64, generator=generator)
        x = torch.zeros(m, n, dtype=torch.float64, device=b.a.device) if init is None else \
            init.to(b.a).expand(m, n).clone()
        return ADMMState(task, b, r, sigma, x, torch.zeros_like(x), None, b.evaluate(x)[1])

    def step(self, state: ADMMState, k: int) -> tuple[ADMMState, Watch]:
        """Iteration k: a communication if k is a multiple of k0 (y, and f(y) and ||grad f(y)||^2 with it), the
        local update, the multiplier update. The watch: f(y) for divergence, ||grad f(y)||^2 for the tolerance."""
        b, sigma = state.blocks, state.sigma
        x, pi, y, grad_x = state.x, state.pi, state.y, state.grad_x
        f_y, grad_sq_y, comm = state.f_y, state.grad_sq_y, state.comm
        if k % self.k0 == 0:  # communication: clients upload z_i = sigma_i x_i + pi_i
            y = (sigma[:, None] * x + pi).sum(0) / sigma.sum()
            comm += 1
            if self.reset_local:
                x = y.expand_as(x).clone()
            f_i, g_i = b.evaluate(y.expand_as(x))
            f_y, grad_sq_y = float(b.weights @ f_i), float(((b.weights @ g_i) ** 2).sum())
            if self.reset_local:
                grad_x = g_i
        x_new = self._local(b, x, y, pi, sigma, state.r, grad_x, state.cache)
        pi_new = pi + sigma[:, None] * (x_new - y) if self.dual else pi
        f_x = None
        if self.solver == "linearized_local":  # the next step needs grad f_i(x_i^{k+1})
            f_x, grad_x = self._evaluate_local(b, x_new, pi_new)
        new = dataclasses.replace(state, x=x_new, pi=pi_new, y=y, grad_x=grad_x, f_x=f_x, before=(state.x, pi,
                                  state.y), comm=comm, f_y=f_y, grad_sq_y=grad_sq_y)
        return new, Watch(bool(torch.isfinite(y).all()), f_y, grad_sq_y)

    def metrics(self, state: ADMMState) -> dict[str, float]:
        """``objective_y`` f(y^{k+1}), ``objective_X`` F(X^{k+1}) = sum_i w_i f_i(x_i^{k+1}), ``lagrangian``
        L(y^{k+1}, X^{k+1}, Pi^{k+1}), ``grad_sq_y``, ``step_sq`` = ||y^{k+1} - y^k||^2 + ||X^{k+1} - X^k||^2 +
        ||Pi^{k+1} - Pi^k||^2 (the last iteration's change of the whole sequence, Frobenius norms), ``comm_rounds``
        and, where the task has test data, ``test_accuracy`` of y."""
        b, x, pi, y, sigma = state.blocks, state.x, state.pi, state.y, state.sigma
        f_x = state.f_x if state.f_x is not None else self._evaluate_local(b, x, pi)[0]
        f_big_x, gap = b.weights @ f_x, x - y
        lagrangian = f_big_x + (pi * gap).sum() + 0.5 * (sigma * (gap * gap).sum(1)).sum()
        step_sq = sum(float(((now - then) ** 2).sum()) for now, then in zip((x, pi, y), state.before)
                      if then is not None)
        values = dict(zip(METRICS, (state.f_y, float(f_big_x), float(lagrangian), state.grad_sq_y, step_sq,
                                    float(state.comm))))
        if state.task.test is not None:
            values["test_accuracy"] = float(state.task.test_metrics(self.params(state))["test_accuracy"])
        return values

    def params(self, state: ADMMState) -> torch.Tensor:
        """The global model y, in the task's dtype."""
        return state.y.to(state.task.dtype)


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

    def __init__(self, k0: int = 1, sigma: float | list | None = None, tol_local: float = 1e-10,
                 reset_local: bool = True, local_solver: str = "factored", init_scale: float = 0.0):
        super().__init__(k0=k0, sigma=sigma, tol_local=tol_local, reset_local=reset_local, init_scale=init_scale)
        self.local_solver = check_choice("local_solver", local_solver, LOCAL_SOLVERS)


@register
class Penalty(ConsensusADMM):
    r"""The quadratic penalty method: Algorithm 2's exact local solves (k0 = 1) with the multipliers held at zero,
    :math:`x_i^{k+1} = \arg\min_x w_i f_i(x) + \tfrac{\sigma_i}{2}\|x - y^{k+1}\|^2`,
    :math:`y^{k+1} = \sum_i\sigma_i x_i^k / \sigma`. It converges, but to a point where
    :math:`\sum_i w_i\nabla f_i(x_i) = 0` with the :math:`x_i` apart, not to the minimiser of :math:`\sum_i w_i f_i`
    when the clients differ: what the multipliers buy (the control of Corollary 3.1's test)."""

    name, dual = "penalty", False

    def __init__(self, sigma: float | list | None = None, tol_local: float = 1e-10):
        super().__init__(k0=1, sigma=sigma, tol_local=tol_local)


@register
class LIADMM(ConsensusADMM):
    """Algorithm 4: linearised at the server point, sigma_i = w_i / gamma, k0 = 1."""

    name, solver = "liadmm", "linearized_server"

    def __init__(self, gamma: float = 0.1):
        super().__init__(k0=1, gamma=gamma, reset_local=False)


@register
class ICEADMM(ConsensusADMM):
    """Algorithm 5: one linearised step (H_i = r_i I, or the authors' Gram curvature for logistic regression)
    per iteration, communication every k0."""

    name, solver = "iceadmm", "linearized_local"

    def __init__(self, k0: int = 1, sigma: float | list | None = None, reset_local: bool = True,
                 curvature: str = "lipschitz", gram_r: float = 6.0, init_scale: float = 0.0):
        super().__init__(k0=k0, sigma=sigma, reset_local=reset_local, curvature=curvature, gram_r=gram_r,
                         init_scale=init_scale)
