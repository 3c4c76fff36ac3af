r"""Server optimisers as pure transforms of the pseudo-gradient (optax's ``init``/``update``, FedJAX's
``server_optimizer.apply``).

One convention for every server step that uses them: with the active clients' deltas
:math:`\Delta_i = x_i - x_0` and aggregation coefficients :math:`c_i`, the pseudo-gradient is
:math:`g_t = -\sum_{i\in A} c_i \Delta_i`, and

.. math::  (u_t, s_t) = \mathrm{update}(g_t, s_{t-1}), \qquad x_{t+1} = x_t + u_t,

with :math:`s_{-1} = \mathrm{init}(x_0)`. A :class:`ServerOptimized` server also hands ``update`` the round's
``uploads`` and ``info`` (keywords), so a step that needs more than the pseudo-gradient (FedExP's extrapolated
server learning rate reads the deltas) is one transform, not a new ``server_update``. FedAvg is ``sgd(server_lr)``,
FedAvgM ``sgd(server_lr, momentum)``, FedAdam / FedYogi / FedAdagrad / N-AccAdam ``adaptive(...)`` and AdaFedAdam
``certainty_adam(...)``, whose update also takes the round's certainty C. A transform never changes its state; it
returns a new one.

``adaptive`` and ``certainty_adam`` multiply by the learning rate inside the step, in the order the committed
results were computed with (``lr * m / (sqrt(v) + tau)``), rather than as a last ``scale(-lr)``: the same
mathematics, and the same bits as before.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..validation import ConfigError, check_choice, check_number
from .base import Algorithm, ServerState


@dataclass(frozen=True)
class ServerOptimizer:
    """``init(x0) -> state`` and ``update(g, state, **extra) -> (u, new state)``, where ``extra`` holds what the server
    step hands on (a :class:`ServerOptimized` server: ``uploads``, name -> [K, ...], and ``info``, the round's
    :class:`~fedcompanion.protocol.RoundInfo`; AdaFedAdam: ``certainty``); the server then sets x <- x + u."""

    init: Callable[[torch.Tensor], Any]
    update: Callable[..., tuple[torch.Tensor, Any]]


def chain(*transforms: ServerOptimizer) -> ServerOptimizer:
    """The transforms applied one after another, each to the previous one's output; the state is their tuple."""
    def init(x0):
        return tuple(t.init(x0) for t in transforms)

    def update(g, state, **extra):
        new = []
        for t, s in zip(transforms, state):
            g, s = t.update(g, s, **extra)
            new.append(s)
        return g, tuple(new)
    return ServerOptimizer(init, update)


def scale(factor: float) -> ServerOptimizer:
    """u = factor * g (no state)."""
    return ServerOptimizer(lambda x0: (), lambda g, state, **extra: (factor * g, ()))


def trace(decay: float, nesterov: bool = False) -> ServerOptimizer:
    r"""Heavy-ball momentum: :math:`v_t = \beta v_{t-1} + g_t`, u = v_t, with :math:`v_{-1} = 0`; with
    ``nesterov``, u = :math:`g_t + \beta v_t` (optax's ``trace(nesterov=True)``)."""
    def update(g, v, **extra):
        v = decay * v + g
        return (g + decay * v if nesterov else v), v
    return ServerOptimizer(torch.zeros_like, update)


def sgd(lr: float, momentum: float = 0.0) -> ServerOptimizer:
    """SGD on the pseudo-gradient, u = -lr g (with ``momentum`` > 0: ``chain(trace(momentum), scale(-lr))``)."""
    check_number("server_lr", lr, low=0.0, low_open=True)
    check_number("momentum", momentum, low=0.0, high=0.999999999)
    return chain(trace(momentum), scale(-lr)) if momentum > 0 else scale(-lr)


def check_betas(betas) -> tuple[float, float]:
    """``betas`` as a pair of numbers in [0, 1), or a :class:`ConfigError` naming them."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ConfigError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    return (check_number("betas[0]", betas[0], low=0.0, high=0.999999999),
            check_number("betas[1]", betas[1], low=0.0, high=0.999999999))


@dataclass(frozen=True)
class MomentsState:
    """The first and second moments m, v [P] and the step count t."""

    m: torch.Tensor
    v: torch.Tensor
    step: int


SECOND_MOMENTS = ("adam", "yogi", "adagrad")


def adaptive(lr: float, betas, tau: float, second_moment: str = "adam",
             bias_correction: bool = False) -> ServerOptimizer:
    r"""Reddi et al.'s adaptive server step (FedAdam, FedYogi, FedAdagrad):

    .. math::
        m_t &= \beta_1 m_{t-1} + (1-\beta_1) g_t \\
        v_t &= v_{t-1} + g_t^2  \;\text{(adagrad)},\quad
        v_{t-1} - (1-\beta_2) g_t^2 \operatorname{sign}(v_{t-1} - g_t^2) \;\text{(yogi)},\quad
        \beta_2 v_{t-1} + (1-\beta_2) g_t^2 \;\text{(adam)} \\
        u_t &= -\eta\, m_t / (\sqrt{v_t} + \tau)

    from :math:`m_{-1} = 0`, :math:`v_{-1} = \tau^2`; with ``bias_correction``, from :math:`v_{-1} = 0` and
    torch.optim.Adam's step :math:`u_t = -\frac{\eta}{1-\beta_1^t}\, m_t / (\sqrt{v_t}/\sqrt{1-\beta_2^t} + \tau)`.
    """
    beta1, beta2 = check_betas(betas)
    check_choice("second_moment", second_moment, SECOND_MOMENTS)

    def init(x0):
        v0 = torch.zeros_like(x0) if bias_correction else torch.full_like(x0, tau**2)
        return MomentsState(torch.zeros_like(x0), v0, 0)

    def update(g, state, **extra):
        m = beta1 * state.m + (1 - beta1) * g
        if second_moment == "adagrad":
            v = state.v + g * g
        elif second_moment == "yogi":
            v = state.v - (1 - beta2) * g * g * torch.sign(state.v - g * g)
        else:
            v = beta2 * state.v + (1 - beta2) * g * g
        t = state.step + 1
        if bias_correction:  # torch.optim.Adam's arithmetic, term for term
            u = -((lr / (1 - beta1**t)) * (m / (v.sqrt() / (1 - beta2**t) ** 0.5 + tau)))
        else:
            u = -(lr * m / (v.sqrt() + tau))
        return u, MomentsState(m, v, t)
    return ServerOptimizer(init, update)


@dataclass(frozen=True)
class CertaintyAdamState:
    """Adam's moments m, v [P], the running products B_1, B_2 of the effective betas, the step count and the last
    certainty C."""

    m: torch.Tensor
    v: torch.Tensor
    beta1_product: float
    beta2_product: float
    step: int
    certainty: float


def certainty_adam(lr: float, betas, eps: float, warmup_steps: int = 0) -> ServerOptimizer:
    r"""AdaFedAdam's Adam with certainty C (``update(g, state, certainty=C)``):

    .. math::
        \tilde\beta_i = \beta_i^{C},\quad m \leftarrow \tilde\beta_1 m + (1-\tilde\beta_1) g,\quad
        v \leftarrow \tilde\beta_2 v + (1-\tilde\beta_2) g^2,\quad B_i \leftarrow B_i \tilde\beta_i,\quad
        u = -\frac{\lambda_t}{1 - B_1}\, \frac{m}{\sqrt{v} / \sqrt{1 - B_2} + \epsilon}

    with :math:`\lambda_t = C\eta` from step ``warmup_steps`` + 1 on (:math:`\eta` before) and
    :math:`B_1 = B_2 = 1` at the start.
    """
    beta1, beta2 = check_betas(betas)

    def init(x0):
        return CertaintyAdamState(torch.zeros_like(x0), torch.zeros_like(x0), 1.0, 1.0, 0, 1.0)

    def update(g, state, *, certainty: float, **extra):
        b1_t, b2_t = beta1**certainty, beta2**certainty
        m = b1_t * state.m + (1 - b1_t) * g
        v = b2_t * state.v + (1 - b2_t) * g * g
        b1, b2 = state.beta1_product * b1_t, state.beta2_product * b2_t
        step = state.step + 1
        rate = lr * certainty if step > warmup_steps else lr
        u = -((rate / (1 - b1)) * (m / (v.sqrt() / math.sqrt(1 - b2) + eps)))
        return u, CertaintyAdamState(m, v, b1, b2, step, certainty)
    return ServerOptimizer(init, update)


@dataclass(frozen=True)
class OptimizedServer(ServerState):
    """x_0 and the server optimiser's state."""

    opt: Any


class ServerOptimized(Algorithm):
    """An algorithm whose server step is a :class:`ServerOptimizer` on a pseudo-gradient of the uploads: the
    empty round (the model and the optimiser's state unchanged) is handled here, once. Subclasses give
    ``server_optimizer()`` and ``pseudo_gradient(info, uploads)``."""

    def server_optimizer(self) -> ServerOptimizer:
        """The server's optimiser, a pure init/update transform of the pseudo-gradient."""
        raise NotImplementedError

    def pseudo_gradient(self, info, uploads) -> torch.Tensor:
        """g, the negated weighted mean of the active clients' deltas: the direction the server optimiser descends."""
        raise NotImplementedError

    def init_server(self, task, x0):
        """The global model x0 and the server optimiser's initial state."""
        return OptimizedServer(x0.clone(), self.server_optimizer().init(x0))

    def server_update(self, server, info, uploads):
        """One server step, x <- x + u with (u, opt) = optimiser.update(g, opt); a round with no active client leaves
        the state as it is."""
        if len(info.clients) == 0:
            return server
        u, opt = self.server_optimizer().update(self.pseudo_gradient(info, uploads), server.opt, uploads=uploads,
                                                info=info)
        return OptimizedServer(server.x + u, opt)
