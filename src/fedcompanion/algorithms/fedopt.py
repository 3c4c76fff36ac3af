r"""Adaptive server optimisers on the pseudo-gradient (Reddi et al., ICLR 2021, "Adaptive Federated
Optimization", Algorithm 2), and N-AccAdam (Ju et al., the AdaFedAdam paper's Theorem 1).

Each active client runs plain local SGD (as FedAvg) and uploads :math:`\Delta_i = x_i - x_t`. With the
normalised weights :math:`q_i = w_i / \sum_{j\in A} w_j`, the pseudo-gradient is
:math:`g_t = -\sum_{i\in A} q_i \Delta_i` (FedAvg with server learning rate 1 is :math:`x_{t+1} = x_t - g_t`),
and the server keeps moments :math:`m, v`:

.. math::
    m_t &= \beta_1 m_{t-1} + (1-\beta_1) g_t \\
    v_t &= v_{t-1} + g_t^2                                             && \text{(FedAdagrad)}\\
    v_t &= v_{t-1} - (1-\beta_2)\, g_t^2\, \mathrm{sign}(v_{t-1} - g_t^2) && \text{(FedYogi)}\\
    v_t &= \beta_2 v_{t-1} + (1-\beta_2) g_t^2                           && \text{(FedAdam)}\\
    x_{t+1} &= x_t - \eta\, m_t / (\sqrt{v_t} + \tau),

with :math:`m_{-1} = 0` and :math:`v_{-1} = \tau^2` (Algorithm 2 has no bias correction; :math:`\tau` is the
degree of adaptivity). ``bias_correction=True`` (FedAdam, FedYogi) instead starts from :math:`v_{-1} = 0` and
takes torch.optim.Adam's step, :math:`x_{t+1} = x_t - \frac{\eta}{1-\beta_1^t}\, m_t /
(\sqrt{v_t}/\sqrt{1-\beta_2^t} + \tau)`: the form the AdaFedAdam authors used as their FedAdam baseline
(``torch.optim.Adam(lr=1e-3)`` on the pseudo-gradient; there :math:`\tau` is Adam's eps).

**N-AccAdam** (``naccadam``): Adam (bias-corrected) whose gradient estimate is the accumulation of
``accumulate`` = N local SGD steps, :math:`g_t = \sum_{s<N} \nabla f(x^{t,s}) = (x_t - x_t^{N}) / \eta_l`
(averaged over the active clients); with N = 1 it is Adam. It sets every client's local step count to N,
whatever the run's local work says.
"""
from __future__ import annotations

import torch

from ..protocol import LocalObjective
from ..validation import ConfigError, check_number
from .base import register
from .fedavg import FedAvg, weighted_mean_of_updates
from .server_optimizers import adaptive, check_betas


class AdaptiveServer(FedAvg):
    """FedAvg's local work, then an adaptive step on the pseudo-gradient (subclasses set ``second_moment``)."""

    second_moment = "adam"

    def __init__(self, server_lr: float = 1e-2, betas: tuple[float, float] = (0.9, 0.99), tau: float = 1e-3,
                 bias_correction: bool = False):
        self.server_lr = check_number("server_lr", server_lr, low=0.0, low_open=True)
        self.betas = tuple(check_betas(betas))
        self.tau = check_number("tau", tau, low=0.0, low_open=True)
        if not isinstance(bias_correction, bool):
            raise ConfigError(f"bias_correction must be True or False, got {bias_correction!r}")
        if bias_correction and self.second_moment == "adagrad":
            raise ConfigError("bias_correction applies to fedadam and fedyogi, not to fedadagrad")
        self.bias_correction = bias_correction

    def server_optimizer(self):
        return adaptive(self.server_lr, self.betas, self.tau, self.second_moment, self.bias_correction)

    def pseudo_gradient(self, info, uploads) -> torch.Tensor:
        return -weighted_mean_of_updates(info, uploads["delta"], "normalized")


@register
class FedAdam(AdaptiveServer):
    """FedAdam. Hyperparameters: ``server_lr`` eta, ``betas``, ``tau``, ``bias_correction``."""

    name, second_moment = "fedadam", "adam"


@register
class FedYogi(AdaptiveServer):
    """FedYogi. Hyperparameters: ``server_lr`` eta, ``betas``, ``tau``, ``bias_correction``."""

    name, second_moment = "fedyogi", "yogi"


@register
class FedAdagrad(AdaptiveServer):
    """FedAdagrad. Hyperparameters: ``server_lr`` eta, ``betas`` (only beta1 is used), ``tau``."""

    name, second_moment = "fedadagrad", "adagrad"

    def __init__(self, server_lr: float = 1e-2, betas: tuple[float, float] = (0.9, 0.99), tau: float = 1e-3):
        super().__init__(server_lr, betas, tau, bias_correction=False)


@register
class NAccAdam(AdaptiveServer):
    """N-AccAdam: Adam (bias-corrected) on the accumulation of ``accumulate`` local SGD steps.

    Hyperparameters: ``accumulate`` N >= 1, ``server_lr`` eta, ``betas``, ``eps``."""

    name = "naccadam"

    def __init__(self, accumulate: int = 1, server_lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        super().__init__(server_lr, betas, eps, bias_correction=True)
        self.accumulate = check_number("accumulate", accumulate, low=1, integer=True)
        self.eps = eps

    def hyperparameters(self) -> dict:
        return {"accumulate": self.accumulate, "server_lr": self.server_lr, "betas": self.betas, "eps": self.eps}

    def local_objective(self, task, received, clients, info):
        steps = torch.full_like(info.steps, self.accumulate)
        return LocalObjective.sgd(received["x"], steps, info.lr)

    def pseudo_gradient(self, info, uploads) -> torch.Tensor:
        return super().pseudo_gradient(info, uploads) / info.lr  # the sum of the N stochastic gradients

