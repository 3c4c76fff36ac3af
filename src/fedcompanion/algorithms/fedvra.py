r"""The primal-dual family: FedVRA, federated ADMM and FedDyn.

Consensus form of :math:`\min_x \sum_i w_i f_i(x)` with local copies :math:`x_i` and the global
model :math:`x_0`; client i's augmented Lagrangian is
:math:`\mathcal{L}_i = f_i(x_i) + \langle\lambda_i, x_0 - x_i\rangle + \frac{\gamma_i}{2}\|x_i - x_0\|^2`
and :math:`\beta = 1 / \sum_i w_i\gamma_i`.

**FedVRA** (Wang et al., AAAI 2023, Algorithm 1), round r with active set :math:`A^r`:

.. math::
    x_i^{r,t+1} &= x_i^{r,t} - \eta\,\big(g_i(x_i^{r,t}) - \lambda_i^r + \gamma_i(x_i^{r,t} - x_0^r)\big),
        \quad t < Q_i^r,\ x_i^{r,0} = x_0^r                                            && (8)\\
    \lambda_i^{r+1} &= \lambda_i^r + a_i^r\gamma_i\,(x_0^r - x_i^{r+1})                 && (9)\\
    \lambda^{r+1} &= \lambda^r - \textstyle\sum_{i\in A^r} w_i a_i^r \gamma_i \Delta_i,
        \quad \Delta_i = x_i^{r+1} - x_0^r                                              && \text{(Step 19)}\\
    x_0^{r+1} &= x_0^r + \beta\textstyle\sum_{i\in A^r} w_i d_i^r\gamma_i\Delta_i - \beta\lambda^{r+1}
                                                                                        && \text{(Step 20)}

so a client uploads one vector :math:`\Delta_i` and one scalar :math:`a_i^r`; the duals stay on the
clients. :math:`a` is the adaptive dual stepsize (0 removes the variance-reduction correction) and
:math:`d` the aggregation stepsize (:math:`d_i^r = 1/p_i^r` makes the expected start point the
model average). ``server_update="direct"`` instead applies eq. (10),
:math:`x_0^{r+1} = x_0^r + \beta\sum_{i=1}^N w_i d_i^r\gamma_i(x_i^{r+1} - x_0^r)
- \beta\sum_{i=1}^N w_i\lambda_i^{r+1}`
with :math:`x_i^{r+1} = x_0^r` for inactive clients, which needs every :math:`\lambda_i` at the
server (two uploaded vectors); the two are equal, which the tests check.

**Federated ADMM** (Algorithm 2) is written here independently, as classical consensus ADMM:
local step (8), :math:`\lambda_i \leftarrow \lambda_i + \gamma_i(x_0 - x_i)`, and
:math:`x_0 = \beta\,(\sum_i w_i\gamma_i x_i - \sum_i w_i\lambda_i)` over all clients. It equals
FedVRA with a = d = 1.

**FedDyn** (Acar et al., ICLR 2021), written as in its paper: local step on
:math:`f_i(x) - \langle\nabla_i, x\rangle + \frac{\alpha}{2}\|x - x_0\|^2`, then
:math:`\nabla_i \leftarrow \nabla_i - \alpha(x_i - x_0)`,
:math:`h \leftarrow h - \frac{\alpha}{N}\sum_{i\in A}(x_i - x_0)`,
:math:`x_0 = \frac{1}{|A|}\sum_{i\in A} x_i - \frac{1}{\alpha}h`. It equals FedVRA with a = 1,
d = N/m, equal weights and :math:`\gamma_i = \alpha`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..engine.local import LocalObjective
from ..validation import ConfigError, check_choice, check_number
from .base import Algorithm, RoundInfo, ServerState, register

Stepsize = float | str | Callable[[RoundInfo], torch.Tensor]


@dataclass
class PrimalDualState(ServerState):
    """x_0, the dual average lambda = sum_i w_i lambda_i, and every client's dual lambda_i [N, P]."""

    lam: torch.Tensor
    lam_clients: torch.Tensor


def _stepsize(name: str, value: Stepsize, info: RoundInfo, dtype) -> torch.Tensor:
    """A per-active-client stepsize [K]: a constant, ``'inverse_probability'`` (1/p_i^r) or a callable."""
    k = len(info.clients)
    if callable(value):
        out = torch.as_tensor(value(info), dtype=dtype).expand(k)
    elif value == "inverse_probability":
        out = 1.0 / info.probs[info.clients].to(dtype)
    else:
        out = torch.full((k,), float(value), dtype=dtype)
    if not torch.isfinite(out).all():
        raise ConfigError(f"{name} is not finite in round {info.round}")
    return out


def _check_stepsize(name: str, value: Stepsize) -> Stepsize:
    if callable(value) or value == "inverse_probability":
        return value
    return check_number(name, value, low=0.0)


def _penalties(gamma, task, dtype) -> torch.Tensor:
    g = torch.as_tensor(gamma, dtype=dtype).expand(task.num_clients).clone()
    if (g <= 0).any():
        raise ConfigError(f"gamma must be > 0 for every client, got {gamma!r}")
    return g


@register
class FedVRA(Algorithm):
    """FedVRA. Hyperparameters: ``gamma`` (penalty gamma_i; a number or one per client),
    ``dual_stepsize`` a_i^r and ``aggregation_stepsize`` d_i^r (each a number >= 0, a callable
    ``RoundInfo -> [K]``, or for d ``'inverse_probability'``: d_i^r = 1/p_i^r), ``server_update``
    ``'split'`` (Steps 19-20) or ``'direct'`` (eq. (10))."""

    name = "fedvra"
    # split: Delta_i and the scalar a_i^r; direct (eq. 10): Delta_i and lambda_i
    upload_vectors = property(lambda self: 1 if self.server_update == "split" else 2)
    upload_scalars = property(lambda self: 1 if self.server_update == "split" else 0)

    def __init__(self, gamma: float | list = 0.1, dual_stepsize: Stepsize = 1.0,
                 aggregation_stepsize: Stepsize = "inverse_probability", server_update: str = "split"):
        if isinstance(gamma, (list, tuple)):
            self.gamma = [check_number("gamma", g, low=0.0, low_open=True) for g in gamma]
        else:
            self.gamma = check_number("gamma", gamma, low=0.0, low_open=True)
        self.dual_stepsize = _check_stepsize("dual_stepsize", dual_stepsize)
        self.aggregation_stepsize = _check_stepsize("aggregation_stepsize", aggregation_stepsize)
        self.server_update = check_choice("server_update", server_update, ("split", "direct"))

    def init(self, task, x0):
        self._gamma = _penalties(self.gamma, task, x0.dtype)
        self._beta = 1.0 / float(task.weights.to(x0.dtype) @ self._gamma)
        zeros = torch.zeros(task.num_clients, len(x0), dtype=x0.dtype)
        return PrimalDualState(x0.clone(), torch.zeros_like(x0), zeros)

    def local_objective(self, state, info):
        c = info.clients
        x = state.x.expand(len(c), -1)
        lr = torch.full((len(c),), info.lr, dtype=x.dtype)
        return LocalObjective(x, x, self._gamma[c], -state.lam_clients[c], torch.ones_like(lr), info.steps, lr)

    def aggregate(self, state, info, x_local, probe=None):
        c, dtype = info.clients, x_local.dtype
        a = _stepsize("dual_stepsize", self.dual_stepsize, info, dtype)
        d = _stepsize("aggregation_stepsize", self.aggregation_stepsize, info, dtype)
        w, gamma = info.active_weights.to(dtype), self._gamma[c]
        delta = x_local - state.x
        state.lam_clients[c] -= (a * gamma)[:, None] * delta  # (9), on the clients
        if self.server_update == "split":
            state.lam = state.lam - (w * a * gamma) @ delta  # Step 19: from the uploaded a_i
        else:
            state.lam = info.weights.to(dtype) @ state.lam_clients  # eq. (10) needs every lambda_i
        state.x = state.x + self._beta * ((w * d * gamma) @ delta) - self._beta * state.lam
        return state


@register
class FedADMM(Algorithm):
    """Federated ADMM (the FedVRA paper's Algorithm 2), as classical consensus ADMM.

    The server keeps a copy of every lambda_i (clients upload x_i and lambda_i: two vectors)."""

    name = "fedadmm"
    upload_vectors = 2

    def __init__(self, gamma: float = 0.1):
        self.gamma = check_number("gamma", gamma, low=0.0, low_open=True)

    def init(self, task, x0):
        zeros = torch.zeros(task.num_clients, len(x0), dtype=x0.dtype)
        return PrimalDualState(x0.clone(), torch.zeros_like(x0), zeros)

    def local_objective(self, state, info):
        return LocalObjective.sgd(state.x, info.steps, info.lr, prox=self.gamma,
                                  linear=-state.lam_clients[info.clients])

    def aggregate(self, state, info, x_local, probe=None):
        w = info.weights.to(x_local.dtype)
        x_all = state.x.expand(len(w), -1).clone()  # inactive clients: x_i^{r+1} = x_0^r
        x_all[info.clients] = x_local
        state.lam_clients[info.clients] += self.gamma * (state.x - x_local)
        # argmin_{x0} sum_i w_i [<lambda_i, x0 - x_i> + gamma/2 ||x_i - x0||^2]
        state.lam = w @ state.lam_clients
        state.x = (self.gamma * (w @ x_all) - state.lam) / (self.gamma * w.sum())
        return state


@dataclass
class FedDynState(ServerState):
    h: torch.Tensor
    grad_clients: torch.Tensor


@register
class FedDyn(Algorithm):
    """FedDyn (Acar et al., 2021) with its unweighted averages; ``alpha`` > 0."""

    name = "feddyn"

    def __init__(self, alpha: float = 0.1):
        self.alpha = check_number("alpha", alpha, low=0.0, low_open=True)

    def init(self, task, x0):
        self._n = task.num_clients
        return FedDynState(x0.clone(), torch.zeros_like(x0), torch.zeros(self._n, len(x0), dtype=x0.dtype))

    def local_objective(self, state, info):
        return LocalObjective.sgd(state.x, info.steps, info.lr, prox=self.alpha,
                                  linear=-state.grad_clients[info.clients])

    def aggregate(self, state, info, x_local, probe=None):
        if len(info.clients) == 0:
            return state
        delta = x_local - state.x
        state.grad_clients[info.clients] -= self.alpha * delta
        state.h = state.h - self.alpha * delta.sum(0) / self._n
        state.x = x_local.mean(0) - state.h / self.alpha
        return state
