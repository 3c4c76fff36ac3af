"""Batched linear algebra of the ADMM family: m small systems at once, one per client (a batch dimension first)."""
from __future__ import annotations

import torch


def bmv(matrices: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """Batched matrix-vector product: [m, p, q] x [m, q] -> [m, p]."""
    return torch.bmm(matrices, vectors.unsqueeze(-1)).squeeze(-1)


def batched_cg(matvec, rhs: torch.Tensor, tol: float, max_iter: int, start: torch.Tensor | None = None
               ) -> torch.Tensor:
    """Conjugate gradients on m independent SPD systems at once (rows of ``rhs``), from zero or from ``start``
    (its first residual rhs - A start), until each residual norm is <= ``tol``.

    Written here because neither torch nor scipy offers a *batched* CG; scipy's ``cg`` would mean
    a Python loop over clients."""
    if start is None:
        x = torch.zeros_like(rhs)
        r = rhs.clone()
    else:
        x = start.clone()
        r = rhs - matvec(x)
    p = r.clone()
    rs = (r * r).sum(1)
    for _ in range(max_iter):
        live = rs > tol**2
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


def exact_factor(b, scale: torch.Tensor, prox: torch.Tensor) -> torch.Tensor:
    """The inverse of s_i (H_i + mu_i I) + rho_i I, [K, n, n] (least squares: factored once per run)."""
    w = scale[:, None]
    eye = torch.eye(b.a.shape[-1], dtype=b.a.dtype, device=b.a.device)
    system = w[:, :, None] * (b.gram + b.l2[:, None, None] * eye) + prox[:, None, None] * eye
    return torch.cholesky_inverse(torch.linalg.cholesky(system))


def woodbury_factor(b, scale: torch.Tensor, prox: torch.Tensor, gram_r: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(kappa_i, (rho_i I + kappa_i A_i A_i^T)^{-1}) with kappa_i = s_i / (d_i r_G): the Gram curvature's factor."""
    c = scale / (b.sizes * gram_r)
    eye = torch.eye(b.a.shape[1], dtype=b.a.dtype, device=b.a.device)
    inner = prox[:, None, None] * eye + c[:, None, None] * torch.bmm(b.a, b.a_transposed)
    return c, torch.cholesky_inverse(torch.linalg.cholesky(inner))
