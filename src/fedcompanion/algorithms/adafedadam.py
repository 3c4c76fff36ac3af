r"""AdaFedAdam (Ju et al., "Accelerating Fair Federated Learning: Adaptive Federated Adam", IEEE TMLCN 2024).

**The DMOP objective.** With :math:`p_k = |D_k| / \sum_j |D_j|` and the inverse training rate
:math:`I_k(t) = F_k(x^t) / F_k(x^0)`, round t minimises :math:`F(x, t) = \sum_k p_k I_k(t)^\alpha F_k(x)`:
:math:`\alpha = 0` is the usual objective, larger :math:`\alpha` weighs the clients that have progressed least.

**Round t.** Each active client k computes its loss :math:`F_k(x^t)` and gradient :math:`\nabla F_k(x^t)` at the
global model (the engine's probe), runs its local SGD from :math:`x^t` to :math:`x_k`, and uploads its delta
:math:`x_k - x^t` (below, :math:`\Delta_k = x^t - x_k` is its negative), :math:`\|\nabla F_k(x^t)\|`,
:math:`F_k(x^t)` and :math:`F_k(x^0)` (one vector and three scalars). The server
(:meth:`AdaFedAdam.server_step`; its Adam is :func:`~fedcompanion.algorithms.server_optimizers.certainty_adam`):

.. math::
    \eta'_k &= \|\Delta_k\| / \|\nabla F_k(x^t)\|, \qquad U_k = \Delta_k / \eta'_k
        && \text{(the update rescaled to the local gradient's norm)}\\
    C_k &= \ln(\eta'_k / \eta_k) + 1 && \text{(certainty; one local step gives } C_k = 1)\\
    q_k &\propto p_k I_k(t)^\alpha \text{ over the participants}, \qquad g = \sum_k q_k U_k,\qquad C = \sum_k q_k C_k\\
    \tilde\beta_i &= \beta_i^{C},\qquad m \leftarrow \tilde\beta_1 m + (1-\tilde\beta_1) g,\qquad
        v \leftarrow \tilde\beta_2 v + (1-\tilde\beta_2) g^2,\qquad B_i \leftarrow B_i \tilde\beta_i\\
    x^{t+1} &= x^t - \frac{\lambda_t}{1 - B_1}\, \frac{m}{\sqrt{v} / \sqrt{1 - B_2} + \epsilon},
        \qquad \lambda_t = C\eta \text{ (from server step ``warmup_steps`` + 1 on; } \eta \text{ before)}

with :math:`B_1 = B_2 = 1` at the start (running-product bias corrections) and :math:`\eta_k` the clients' nominal
local learning rate. With :math:`\alpha = 0`, one full-batch local SGD step and full participation this is Adam
on :math:`\sum_k p_k \nabla F_k(x^t)`, which the tests check over many rounds.

.. warning:: Where the authors' released code (github.com/li-ju666/adafedadam) departs from the paper:
   its weights are :math:`q_k \propto |D_k| F_k(x^t)` (no :math:`\alpha`, no :math:`F_k(x^0)`; the paper's
   :math:`\alpha = 1` when all :math:`F_k(x^0)` are equal): ``weighting='code'``; it scales the step by C only
   from its 7th server step (``steps > 5`` is tested before the count is incremented): ``warmup_steps=6``;
   it estimates :math:`F_k(x^t)` and :math:`\nabla F_k(x^t)` on one shuffled batch of up to 512 samples in train
   mode (``probe_samples=512``; by default here: on the client's whole training data); its local optimiser
   is SGD with momentum 0.9 and weight decay 5e-4 whose buffer is never reset (``LocalWork(momentum=0.9,
   weight_decay=5e-4, momentum_reset=False)``), while C uses the nominal learning rate. Here :math:`p_k` is
   the task's client weight :math:`w_k` (:math:`n_k / n` by default).
"""
from __future__ import annotations

import torch

from ..protocol import entries_of
from ..validation import ConfigError, check_choice, check_number
from .base import delta, register
from .server_optimizers import OptimizedServer, ServerOptimized, certainty_adam, check_betas

WEIGHTINGS = ("paper", "code")


@register
class AdaFedAdam(ServerOptimized):
    """AdaFedAdam. Hyperparameters: ``alpha`` >= 0 (fairness), ``server_lr`` eta, ``betas``, ``eps``,
    ``warmup_steps`` (server steps before the step is scaled by C), ``weighting`` (``'paper'`` or ``'code'``) and
    ``probe_samples`` (``None``: F_k(x^t) and grad F_k(x^t) on the client's full data; the code: 512). Client
    state: F_k(x^0).

    For an ablation of its three changes to FedAdam: ``normalise=False`` aggregates the raw updates Delta_k
    instead of U_k = Delta_k / eta'_k, ``certainty=False`` fixes C = 1 (plain Adam with step eta), and ``alpha=0``
    drops the fairness weights (q_k = p_k)."""

    name = "adafedadam"
    needs_probe = True

    def __init__(self, alpha: float = 1.0, server_lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, warmup_steps: int = 0, weighting: str = "paper", probe_samples: int | None = None,
                 normalise: bool = True, certainty: bool = True):
        self.alpha = check_number("alpha", alpha, low=0.0)
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)
        self.betas = tuple(check_betas(betas))
        self.eps = check_number("eps", eps, low=0.0, low_open=True)
        self.warmup_steps = check_number("warmup_steps", warmup_steps, low=0, integer=True)
        self.weighting = check_choice("weighting", weighting, WEIGHTINGS)
        self.probe_samples = None if probe_samples is None else check_number("probe_samples", probe_samples, low=1,
                                                                            integer=True)
        for name, value in (("normalise", normalise), ("certainty", certainty)):
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be True or False, got {value!r}")
        self.normalise, self.certainty = normalise, certainty

    # ------------------------------------------------------------------ the server step, on its own
    def server_optimizer(self):
        return certainty_adam(self.server_lr, self.betas, self.eps, self.warmup_steps)

    def server_step(self, state: OptimizedServer, updates: torch.Tensor, grad_norms: torch.Tensor,
                    losses: torch.Tensor, initial_losses: torch.Tensor, sizes: torch.Tensor,
                    local_lrs: torch.Tensor | float) -> OptimizedServer:
        """One server step from the K participants' uploads: ``updates[k] = x^t - x_k`` [K, P], and [K] each of
        ||grad F_k(x^t)||, F_k(x^t), F_k(x^0), sizes (or weights p_k) and local learning rates eta_k."""
        k = len(updates)
        if k == 0:
            return state
        dtype = updates.dtype
        vec = lambda v: torch.as_tensor(v, dtype=dtype, device=updates.device).expand(k)  # noqa: E731
        grad_norms, losses, initial, sizes, lrs = map(vec, (grad_norms, losses, initial_losses, sizes, local_lrs))
        if (grad_norms <= 0).any() or (losses < 0).any() or (initial <= 0).any() or (lrs <= 0).any():
            raise ConfigError("adafedadam needs gradient norms, initial losses and learning rates > 0 and losses >= 0")
        update_norms = updates.norm(dim=1)
        scale = update_norms / grad_norms  # eta'_k
        if self.normalise:
            updates = updates / torch.where(scale > 0, scale, torch.ones_like(scale))[:, None]
        certainty = torch.log(torch.where(scale > 0, scale, lrs) / lrs) + 1
        if self.weighting == "paper":
            q = sizes * (losses / initial) ** self.alpha
        else:
            q = sizes * losses
        if not q.sum() > 0:
            raise ConfigError("adafedadam's aggregation weights are all zero (every participant's loss is 0)")
        q = q / q.sum()
        g = q @ updates  # the pseudo-gradient, a weighted mean of -Delta_k / eta'_k (-Delta_k without normalise)
        c = float(q @ certainty) if self.certainty else 1.0
        u, opt = self.server_optimizer().update(g, state.opt, certainty=c)
        return OptimizedServer(state.x + u, opt)

    # ------------------------------------------------------------------ as an engine algorithm
    def init_clients(self, task, x0):
        return {"initial_loss": entries_of(task.evaluate_clients(x0)[0].to(x0.dtype))}

    def client_update(self, task, received, clients, info, result):
        losses, grads = result.probe
        uploads = {"delta": delta(received, result), "grad_norm": grads.norm(dim=1), "loss": losses,
                   "initial_loss": clients["initial_loss"]}
        return {}, uploads

    def server_update(self, server, info, uploads):
        return self.server_step(server, -uploads["delta"], uploads["grad_norm"], uploads["loss"],
                                uploads["initial_loss"], info.active_weights, info.lr)


def alpha_fair_objective(task, x: torch.Tensor, alpha: float) -> torch.Tensor:
    r"""The alpha-fair objective :math:`\sum_k p_k F_k(x)^{\alpha+1} / (\alpha + 1)` (differentiable in x)."""
    losses = torch.stack([task.client_loss(k, x) for k in range(task.num_clients)])
    return task.weights.to(losses) @ losses ** (alpha + 1) / (alpha + 1)


def dmop_objective(task, x: torch.Tensor, x_t: torch.Tensor, x_0: torch.Tensor, alpha: float) -> torch.Tensor:
    r"""The DMOP objective of round t, :math:`F(x, t) = \sum_k p_k I_k(t)^\alpha F_k(x)` with
    :math:`I_k(t) = F_k(x^t) / F_k(x^0)` held fixed (differentiable in x)."""
    with torch.no_grad():
        rate = task.evaluate_clients(x_t)[0] / task.evaluate_clients(x_0)[0]
    losses = torch.stack([task.client_loss(k, x) for k in range(task.num_clients)])
    return (task.weights.to(losses) * rate.to(losses) ** alpha) @ losses
