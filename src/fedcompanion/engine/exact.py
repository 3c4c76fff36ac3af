r"""The exact kernel: a local objective minimised exactly, or by one linearised step, instead of by SGD.

An algorithm asks for it by giving its :class:`~fedcompanion.protocol.LocalObjective` an
:class:`~fedcompanion.protocol.ExactSolve` (the ADMM family, :mod:`fedcompanion.algorithms.ceadmm`); the driver then
runs this kernel whatever the engine. The K active clients' objectives

.. math::  h_i(x) = s_i f_i(x) + \langle c_i, x\rangle + \tfrac{\rho_i}{2}\|x - z_i\|^2

are solved together on the task's zero-padded client blocks (``task.client_blocks()``, a linear model), a handful
of batched tensor operations per solve:

* ``exact``, least squares: :math:`(s_i(H_i + \mu_i I) + \rho_i I)\,x = s_i A_i^\top b_i/d_i - c_i + \rho_i z_i`
  through the cached inverse (``factored``); or the authors' inexact Newton step by CG from zero (``cg``: at most 50
  CG iterations, squared residual below 1e-8 of the gradient's); or CG from the start to 1e-8 of the right-hand
  side's norm (``cg_warm``).
* ``exact``, otherwise (logistic, the non-convex regulariser): batched Newton-CG to a gradient norm of ``tol``, each
  client's Newton step halved until its objective decreases.
* ``linearized_server``: :math:`x_i = z_i - (s_i\nabla f_i(z_i) + c_i)/\rho_i`.
* ``linearized_local``: :math:`x_i = x_i^0 + (\rho_i(z_i - x_i^0) - s_i\nabla f_i(x_i^0) - c_i)/(s_i r_i + \rho_i)`
  (H_i = r_i I), or with :math:`H_i = A_i^\top A_i/(d_i r_G)` through the cached Woodbury factor
  :math:`(\rho_i I + \kappa_i A_i A_i^\top)^{-1}`, :math:`\kappa_i = s_i/(d_i r_G)`:
  :math:`(\rho_i I + \kappa_i A_i^\top A_i)^{-1} = (I - \kappa_i A_i^\top(\rho_i I + \kappa_i A_i A_i^\top)^{-1}A_i)
  /\rho_i`.

The cached factors are the algorithm's (client-state entries it computes once, with :func:`fedcompanion.linalg.
exact_factor` and :func:`~fedcompanion.linalg.woodbury_factor`), handed over in the solve's ``factor``.
"""
from __future__ import annotations

import torch

from ..linalg import batched_cg, bmv
from ..protocol import ExactSolve, LocalObjective


def train_exact(task, objective: LocalObjective, clients: torch.Tensor, **_) -> tuple[torch.Tensor, None]:
    """x_i for the K active clients [K, n] (and no momentum buffers): the engines' ``train`` signature, so that the
    driver calls it in their place when the objective declares a solve."""
    solve = objective.solve
    b = task.client_blocks().select(clients.tolist())
    x, z, c, rho = objective.start, objective.anchor, objective.linear, objective.prox
    w = objective.scale[:, None]
    if solve.method == "exact":
        return _exact(b, solve, x, z, c, rho, w), None
    if solve.method == "linearized_server":  # z - (s grad f(z) + c) / rho
        return z - (w * solve.gradient + c) / rho[:, None], None
    rhs = rho[:, None] * (z - x) - w * solve.gradient - c  # linearised at the start x^0
    if solve.curvature == "lipschitz":  # H_i = r_i I
        return x + rhs / (w * solve.curvature_scale[:, None] + rho[:, None]), None
    kappa, inner_inverse = solve.factor
    correction = b._at(bmv(inner_inverse, b.predict(rhs))) * b.sizes[:, None]  # A^T M A rhs
    return x + (rhs - kappa[:, None] * correction) / rho[:, None], None


def _exact(b, solve: ExactSolve, x, z, c, rho, w) -> torch.Tensor:
    quadratic = b.loss.quadratic and not b.nonconvex
    if quadratic and solve.local_solver != "factored":
        def hessian(v):  # (s_i H_i + rho_i I) v
            return w * b.hvp(x, v) + rho[:, None] * v

        if solve.local_solver == "cg":  # the authors' code: the Newton step by CG from zero
            g = w * b.evaluate(x)[1] + c + rho[:, None] * (x - z)
            return x - batched_cg(hessian, g, 1e-4 * g.norm(dim=1), 50)
        rhs = w * b.atb - c + rho[:, None] * z  # cg_warm: the solve to 1e-8, CG from the start
        return batched_cg(hessian, rhs, 1e-8 * rhs.norm(dim=1), 50, start=x)
    if quadratic:  # one batched product with the cached inverse
        return bmv(solve.factor, w * b.atb - c + rho[:, None] * z)

    def local(x):  # (h_i(x), its gradient)
        f, g = b.evaluate(x)
        value = w[:, 0] * f + (c * x).sum(1) + 0.5 * rho * ((x - z) ** 2).sum(1)
        return value, w * g + c + rho[:, None] * (x - z)

    value, g = local(x)
    for _ in range(50):  # Newton-CG, each client's step halved until its local objective decreases
        if g.norm(dim=1).max() <= solve.tol:
            break
        step = batched_cg(lambda v, x=x: w * b.hvp(x, v) + rho[:, None] * v, g, solve.tol * 1e-2, 200)
        t = torch.ones_like(value)
        for _ in range(30):
            trial_value, trial_g = local(x - t[:, None] * step)
            worse = ~(trial_value <= value + 1e-12 * value.abs())  # (rounding is no increase; NaN is)
            if not worse.any():
                break
            t = torch.where(worse, 0.5 * t, t)
        x, value, g = x - t[:, None] * step, trial_value, trial_g
    return x
