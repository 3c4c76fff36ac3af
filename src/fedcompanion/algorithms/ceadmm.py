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

On the protocol (:mod:`fedcompanion.protocol`) a round is one iteration: ``broadcast`` sends y only when
k mod k0 = 0 (so communication is counted from the messages, as for every algorithm); each client's local
objective is :math:`h_i(x) = w_i f_i(x) + \langle\pi_i, x\rangle + \tfrac{\sigma_i}{2}\|x - y\|^2` (s = w_i,
c = pi_i, rho = sigma_i, z = y) with an :class:`~fedcompanion.protocol.ExactSolve` saying how it is minimised (the
exact kernel, :mod:`fedcompanion.engine.exact`, does it on any engine); ``client_update`` is the multiplier step
and uploads z_i when the next iteration communicates; ``server_update`` sums the uploads into the next y. Every
client works in every round (``every_client``). ``watch`` gives the driver f(y) and
:math:`\|\nabla f(y)\|^2` (divergence, ``tol``), ``diagnostics`` the records below.

Nothing here needs convexity: a task with the non-convex regulariser (``Task.nonconvex``) runs like any other,
which is what Theorems 3.1-3.3 are about. ``init_scale`` > 0 starts from :math:`x^0 \sim` ``init_scale`` N(0, I)
drawn with the run's seed (default: zeros, the authors' start).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ..linalg import exact_factor, woodbury_factor
from ..protocol import LOCAL_SOLVERS, ExactSolve, LocalObjective, Rows, Watch
from ..validation import ConfigError, check_choice, check_number
from .base import Algorithm, register

SOLVERS = ("exact", "linearized_server", "linearized_local")
CURVATURES = ("lipschitz", "gram")


def default_penalties(blocks, k0: int, r: torch.Tensor) -> torch.Tensor:
    """sigma_i = r0 / log(2 + k0) * log(m d_i) * w_i r_i (the authors' code)."""
    m = len(blocks.sizes)
    r0 = 0.1 if m > 20 else (0.12 if m > 10 else 0.15)
    return r0 / math.log(2 + k0) * torch.log(m * blocks.sizes) * blocks.weights * r


METRICS = ("objective_y", "objective_X", "lagrangian", "grad_sq_y", "step_sq", "comm_rounds")


@dataclass(frozen=True)
class ADMMServer:
    """The server between two iterations: ``x`` the global model in the task's dtype (x^0 before the first
    iteration, then the y of the last one), ``y`` that y in float64 (``None`` before the first iteration), ``z`` the
    sum of the last uploads sigma_i x_i + pi_i (the next y is z / sum_i sigma_i), the iteration count ``k`` and the
    communications so far."""

    x: torch.Tensor
    y: torch.Tensor | None
    z: torch.Tensor
    sigma_sum: torch.Tensor
    k: int = 0
    comm: int = 0


class ConsensusADMM(Algorithm):
    """The family above: every client in every iteration, a round being one iteration
    (``fc.run(task, fc.make("iceadmm", k0=10), rounds=...)``)."""

    name = "consensus_admm"
    solver = "exact"
    dual = True
    local_solver = "factored"
    every_client = True
    solves_exactly = True
    linear_only = True

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

    def penalties(self, blocks, r: torch.Tensor) -> torch.Tensor:
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

    def _blocks(self, task, clients=None):
        """The task's client blocks (all, or ``clients``' only), or the reason the algorithm cannot run on it."""
        try:
            b = task.client_blocks()
        except NotImplementedError as exc:
            raise ConfigError(f"{self.name} needs a linear model with a least-squares or logistic loss: {exc}") \
                from None
        return b if clients is None else b.select(clients.tolist())

    def _factored(self, b) -> bool:
        """Whether the exact solve is one product with a cached inverse (least squares, the factored solver)."""
        return self.solver == "exact" and b.loss.quadratic and not b.nonconvex and self.local_solver == "factored"

    # ------------------------------------------------------------------ state
    def initial_model(self, task, seed: int) -> torch.Tensor:
        """x^0: zeros (the authors' start), or ``init_scale`` N(0, I) drawn with ``seed``; float64."""
        n = self._blocks(task).a.shape[-1]
        if self.init_scale:
            return self.init_scale * torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        return torch.zeros(n, dtype=torch.float64)

    def init(self, task, x0: torch.Tensor):
        """Every local copy at x0, multipliers zero, the penalties (:meth:`penalties`), the Lipschitz constants and
        the cached factors as client-state entries; the server holds the first y's numerator."""
        from ..protocol import State

        b = self._blocks(task)
        m, n = len(b.sizes), b.a.shape[-1]
        r = b.lipschitz()
        sigma = self.penalties(b, r)
        if self.solver == "exact" and b.nonconvex and bool((sigma <= b.weights * b.nonconvex / 2).any()):
            raise ConfigError(f"{self.name}'s local objective is not convex: with nonconvex={b.nonconvex} every "
                              f"sigma_i must exceed w_i * nonconvex / 2 (smallest sigma_i / w_i: "
                              f"{float((sigma / b.weights).min()):.3g})")
        x = x0.to(b.a).expand(m, n).clone()
        pi = torch.zeros_like(x)
        f_x, grad_x = b.evaluate(x)
        clients = {"x": Rows(x), "pi": Rows(pi), "sigma": Rows(sigma), "r": Rows(r), "grad": Rows(grad_x),
                   "f_x": Rows(f_x), "y": Rows(x), "f_y": Rows(f_x), "g_y": Rows(grad_x)}
        if self._factored(b):
            clients["factor"] = Rows(exact_factor(b, b.weights, sigma))
        if self.solver == "linearized_local" and self.curvature == "gram":
            kappa, inverse = woodbury_factor(b, b.weights, sigma, self.gram_r)
            clients["kappa"], clients["factor"] = Rows(kappa), Rows(inverse)
        server = ADMMServer(x0.to(task.dtype), None, (sigma[:, None] * x + pi).sum(0), sigma.sum())
        return State(server, clients)

    # ------------------------------------------------------------------ one iteration
    def _communicates(self, k: int) -> bool:
        """Whether iteration k (counted from 0) communicates: k mod k0 = 0."""
        return k % self.k0 == 0

    def broadcast(self, state) -> dict:
        """y = z / sum_i sigma_i when this iteration communicates (k mod k0 = 0), else nothing."""
        server = state.server
        return {"y": server.z / server.sigma_sum} if self._communicates(server.k) else {}

    def local_objective(self, task, received, clients, info) -> LocalObjective:
        """h_i = w_i f_i + <pi_i, x> + sigma_i/2 ||x - y||^2 from x_i (from y after a reset), with its solve; on a
        communication the clients evaluate f_i and grad f_i at the new y (the linearisation point after a reset)."""
        b = self._blocks(task, info.clients)
        x, sigma = clients["x"], clients["sigma"]
        grad = clients["grad"]
        at_y = None
        if "y" in received:
            y = received["y"].expand_as(x)
            if self.reset_local:
                x = y.clone()
            at_y = b.evaluate(y)
            if self.reset_local:
                grad = at_y[1]
        else:
            y = clients["y"]
        factor = None
        if "factor" in clients:
            factor = (clients["kappa"], clients["factor"]) if "kappa" in clients else clients["factor"]
        gradient = {"linearized_server": None if at_y is None else at_y[1], "linearized_local": grad}.get(self.solver)
        solve = ExactSolve(self.solver, self.local_solver, self.curvature, self.tol_local, gradient, clients["r"],
                           factor)
        return _Objective(x, y, sigma, clients["pi"], b.weights, info.steps, torch.full_like(sigma, math.nan),
                          solve=solve, at_y=at_y)

    def client_update(self, task, received, clients, info, result):
        """pi_i + sigma_i (x_i - y) (held at zero without multipliers); the upload z_i = sigma_i x_i + pi_i when the
        next iteration communicates."""
        objective = result.objective
        x, y, sigma = result.x, objective.anchor, objective.prox
        pi = clients["pi"] + sigma[:, None] * (x - y) if self.dual else clients["pi"]
        new = {"x": x, "pi": pi}
        if self.solver == "linearized_local":  # the next step linearises at x_i^{k+1}
            new["f_x"], new["grad"] = self._evaluate_local(self._blocks(task, info.clients), x, pi)
        if objective.at_y is not None:
            new["y"], new["f_y"], new["g_y"] = y, *objective.at_y
        uploads = {"z": sigma[:, None] * x + pi} if self._communicates(info.round + 1) else {}
        return new, uploads

    def server_update(self, server: ADMMServer, info, uploads) -> ADMMServer:
        """y when this iteration communicated (the y it broadcast), and the next y's numerator from the uploads."""
        y, x, comm = server.y, server.x, server.comm
        if self._communicates(server.k):
            y = server.z / server.sigma_sum
            x, comm = y.to(server.x.dtype), comm + 1
        z = uploads["z"].sum(0) if "z" in uploads else server.z
        return dataclasses.replace(server, x=x, y=y, z=z, k=server.k + 1, comm=comm)

    def _evaluate_local(self, b, x: torch.Tensor, pi: torch.Tensor):
        """(f_i(x_i^{k+1}), grad f_i(x_i^{k+1})). After the factored least-squares solve (exact to rounding) the
        optimality condition w_i grad f_i(x_i^{k+1}) + pi_i^{k+1} = 0 gives the gradient for free, and with it the
        value f_i = f^_i + e'(grad - mu_i x)/2 + mu_i ||x||^2/2, e = x - x^_i (see ``ClientBlocks.evaluate``). A CG
        solve meets that condition only up to its residual, so its iterate is evaluated on the data."""
        if not (self._factored(b) and self.dual and b.uses_gram):
            return b.evaluate(x)
        grad = -pi / b.weights[:, None]
        e = x - b.anchor
        if not b.regularised:  # mu_i = 0: the same numbers without the terms that vanish
            return b.floor + 0.5 * (e * grad).sum(1), grad
        reg = b.l2[:, None] * x
        return b.floor + 0.5 * (e * (grad - reg)).sum(1) + 0.5 * (reg * x).sum(1), grad

    # ------------------------------------------------------------------ what the driver reads
    def _at_y(self, task, state) -> tuple[float, float]:
        """(f(y), ||grad f(y)||^2) at the last broadcast y, from what the clients evaluated there (a server that holds
        no client state, Flower's, evaluates them itself)."""
        b = self._blocks(task)
        if "f_y" not in state.clients:
            f_i, g_i = b.evaluate(state.server.y.expand(len(b.sizes), -1))
        else:
            f_i, g_i = state.clients["f_y"].block, state.clients["g_y"].block
        return float(b.weights @ f_i), float(((b.weights @ g_i) ** 2).sum())

    def watch(self, task, state) -> Watch:
        """Whether y is finite, f(y) (judged for divergence) and ||grad f(y)||^2 (judged against ``tol``)."""
        return Watch(bool(torch.isfinite(state.server.y).all()), *self._at_y(task, state))

    def diagnostics(self, task, state, previous) -> dict[str, float]:
        """After an iteration: ``objective_y`` f(y), ``objective_X`` F(X) = sum_i w_i f_i(x_i), ``lagrangian``
        L(y, X, Pi), ``grad_sq_y``, ``step_sq`` = ||y - y'||^2 + ||X - X'||^2 + ||Pi - Pi'||^2 (the iteration's
        change, Frobenius norms; the first iteration's without y, which did not exist before it) and
        ``comm_rounds``. Nothing before the first iteration (round 0), where y^{k+1} is not yet defined."""
        if previous is None:
            return {}
        b, clients, server = self._blocks(task), state.clients, state.server
        x, pi, sigma = clients["x"].block, clients["pi"].block, clients["sigma"].block
        f_y, grad_sq_y = self._at_y(task, state)
        f_x = clients["f_x"].block if self.solver == "linearized_local" else self._evaluate_local(b, x, pi)[0]
        f_big_x, gap = b.weights @ f_x, x - server.y
        lagrangian = f_big_x + (pi * gap).sum() + 0.5 * (sigma * (gap * gap).sum(1)).sum()
        before = (previous.clients["x"].block, previous.clients["pi"].block, previous.server.y)
        step_sq = sum(float(((now - then) ** 2).sum()) for now, then in zip((x, pi, server.y), before)
                      if then is not None)
        return dict(zip(METRICS, (f_y, float(f_big_x), float(lagrangian), grad_sq_y, step_sq, float(server.comm))))


@dataclass(frozen=True)
class _Objective(LocalObjective):
    """The family's local objective, carrying (f_i(y), grad f_i(y)) where the clients evaluated them this round
    (``at_y``), for the client update to keep."""

    at_y: tuple | None = None


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
