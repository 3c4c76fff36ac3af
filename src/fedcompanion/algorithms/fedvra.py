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

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..protocol import ActiveClients, LocalObjective, Negated, RoundInfo, entries_of, replace_entries, zero_rows
from ..validation import ConfigError, check_choice, check_number
from .base import Algorithm, ServerState, delta, register

Stepsize = float | str | Callable[[RoundInfo], torch.Tensor]


RULES = ("inverse_probability", "local_work", "label_shift")  # named per-client, per-round stepsize rules


def label_shift(task, clients: torch.Tensor) -> torch.Tensor:
    r"""2 TV_i for the given clients [K]: twice the total variation distance between client i's label distribution
    and that of all the training data, :math:`\sum_c |q_{ic} - q_c|` in [0, 2] (0 for a client whose labels are
    mixed like everyone's). Refuses a task without one class label per row (regression, clustering, soft labels)."""
    if not task.loss.labelled or task.y_all.ndim != 1:
        raise ConfigError(f"dual_stepsize='label_shift' needs a task with one class label per row; task "
                          f"{task.name!r} has {task.loss.name} targets of shape {tuple(task.y_all.shape)}")
    labels = task.y_all.long()
    classes = int(labels.max()) + 1
    overall = torch.bincount(labels, minlength=classes).double() / len(labels)
    out = []
    for i in clients.tolist():
        mine = torch.bincount(labels[int(task.offsets[i]):int(task.offsets[i + 1])], minlength=classes).double()
        out.append(float((mine / mine.sum() - overall).abs().sum()))
    return torch.tensor(out)


def _stepsize(name: str, value: Stepsize, info: RoundInfo, dtype, task=None) -> torch.Tensor:
    """A per-active-client stepsize [K]: a constant, a callable, or a named rule (ours, for the paper's 'adaptive'
    stepsizes): ``'inverse_probability'`` 1/p_i^r; ``'local_work'`` Q_i^r / mean_{j in A^r} Q_j^r (a client's share of
    the round's local work: time-varying under uneven local work); ``'label_shift'`` (dual stepsize only) 2 TV_i,
    larger for a client whose labels are mixed less like everyone's (the paper: "a relatively large value of a_i^r
    is preferred when the data distribution gets more non-i.i.d.")."""
    k, device = len(info.clients), info.probs.device
    if callable(value):
        out = torch.as_tensor(value(info), dtype=dtype, device=device).expand(k)
    elif value == "inverse_probability":
        out = 1.0 / info.active_probs.to(dtype)
    elif value == "local_work":
        steps = info.steps.to(dtype)
        out = steps / steps.mean() if k else steps
    elif value == "label_shift":
        out = label_shift(task, info.clients.cpu()).to(device, dtype)
    else:
        out = torch.full((k,), float(value), dtype=dtype, device=device)
    if not torch.isfinite(out).all() or (out < 0).any():
        raise ConfigError(f"{name} must be finite and >= 0 for every client; round {info.round} gave {out.tolist()}")
    return out


def _check_stepsize(name: str, value: Stepsize, rules: tuple = RULES) -> Stepsize:
    if callable(value):
        return value
    if isinstance(value, str):
        return check_choice(name, value, rules)
    return check_number(name, value, low=0.0)


def _check_gamma(gamma):
    if isinstance(gamma, (list, tuple)):
        if not gamma:
            raise ConfigError("gamma must be a number or a non-empty list (one per client), got []")
        return [check_number("gamma", g, low=0.0, low_open=True) for g in gamma]
    return check_number("gamma", gamma, low=0.0, low_open=True)


def penalties(gamma, num_clients: int, dtype) -> torch.Tensor:
    """gamma_i for every client [N], from one number or a list of N."""
    if isinstance(gamma, (list, tuple)) and len(gamma) != num_clients:
        raise ConfigError(f"gamma has {len(gamma)} values but the task has {num_clients} clients; "
                          "give one number or one value per client")
    return torch.as_tensor(gamma, dtype=dtype).expand(num_clients).clone()


@dataclass(frozen=True)
class FedVRAServer(ServerState):
    """x_0, the dual average lambda = sum_i w_i lambda_i, gamma_i of every client [N], beta = 1/sum_i w_i gamma_i,
    and (``server_update='direct'`` only) the server's copies of every lambda_i."""

    lam: torch.Tensor
    gamma: torch.Tensor
    beta: float
    lam_copies: tuple | None = None


@register
class FedVRA(Algorithm):
    """FedVRA. Hyperparameters: ``gamma`` (penalty gamma_i; a number or one per client),
    ``dual_stepsize`` a_i^r and ``aggregation_stepsize`` d_i^r (each a number >= 0, a callable
    ``RoundInfo -> [K]``, or a named rule of :func:`_stepsize`: ``'inverse_probability'`` d_i^r = 1/p_i^r,
    ``'local_work'``, and for a only ``'label_shift'``), ``server_update`` ``'split'`` (Steps 19-20) or
    ``'direct'`` (eq. (10)).

    Client state: lambda_i (and gamma_i). Uploads: Delta_i and the scalar a_i^r (split) or Delta_i and
    lambda_i (direct)."""

    name = "fedvra"

    def __init__(self, gamma: float | list = 0.1, dual_stepsize: Stepsize = 1.0,
                 aggregation_stepsize: Stepsize = "inverse_probability", server_update: str = "split"):
        self.gamma = _check_gamma(gamma)
        self.dual_stepsize = _check_stepsize("dual_stepsize", dual_stepsize)
        self.aggregation_stepsize = _check_stepsize("aggregation_stepsize", aggregation_stepsize,
                                                    ("inverse_probability", "local_work"))
        self.server_update_rule = check_choice("server_update", server_update, ("split", "direct"))

    def hyperparameters(self) -> dict:
        return {"gamma": self.gamma, "dual_stepsize": self.dual_stepsize,
                "aggregation_stepsize": self.aggregation_stepsize, "server_update": self.server_update_rule}

    def init_server(self, task, x0):
        gamma = penalties(self.gamma, task.num_clients, x0.dtype).to(x0.device)
        beta = 1.0 / float(task.weights.to(x0) @ gamma)
        copies = zero_rows(task.num_clients, x0)
        return FedVRAServer(x0.clone(), torch.zeros_like(x0), gamma, beta,
                            copies if self.server_update_rule == "direct" else None)

    def init_clients(self, task, x0):
        if self.dual_stepsize == "label_shift":
            label_shift(task, torch.zeros(0, dtype=torch.long))  # refuses an unlabelled task before any work
        gamma = penalties(self.gamma, task.num_clients, x0.dtype).to(x0.device)
        return {"lam": zero_rows(task.num_clients, x0), "gamma": entries_of(gamma)}

    def local_objective(self, task, received, clients, info):
        return LocalObjective.sgd(received["x"], info.steps, info.lr, prox=clients["gamma"],
                                  linear=Negated(clients.entries("lam")))

    def client_update(self, task, received, clients, info, result):
        d_i = delta(received, result)
        a = _stepsize("dual_stepsize", self.dual_stepsize, info, d_i.dtype, task)
        # (9): lambda_i + a gamma (x_0 - x_i) = lambda_i - a gamma Delta_i, one new [P] per client: neither a [K, P]
        # stack of the old lambdas nor copies of rows out of a [K, P] result (State keeps entries of their own)
        coefficients = (-(a * clients["gamma"])).tolist()
        lam = tuple(torch.mul(d, c).add_(old) for d, c, old in zip(d_i, coefficients, clients.entries("lam")))
        split = self.server_update_rule == "split"
        return {"lam": lam}, ({"delta": d_i, "a": a} if split else {"delta": d_i, "lam": torch.stack(lam)})

    def server_update(self, server, info, uploads):
        d_i = uploads["delta"]
        w, gamma = info.active_weights.to(d_i.dtype), server.gamma[info.clients]
        d = _stepsize("aggregation_stepsize", self.aggregation_stepsize, info, d_i.dtype)
        copies = server.lam_copies
        if self.server_update_rule == "split":
            lam = server.lam - (w * uploads["a"] * gamma) @ d_i  # Step 19, from the uploaded a_i
        else:  # eq. (10) needs every lambda_i: the server keeps a copy of each
            copies = replace_entries(copies, info.clients, uploads["lam"])
            lam = info.weights.to(d_i.dtype) @ torch.stack(list(copies))
        x = server.x + server.beta * ((w * d * gamma) @ d_i) - server.beta * lam  # Step 20
        return dataclasses.replace(server, x=x, lam=lam, lam_copies=copies)


@dataclass(frozen=True)
class FedADMMServer(ServerState):
    """x_0, the server's copies of every client's lambda_i (zero rows until a client uploads one) and their
    weighted sum lam = sum_i w_i lambda_i in float64, kept up to date from the round's uploads."""

    lam_copies: tuple
    lam: torch.Tensor


@register
class FedADMM(Algorithm):
    """Federated ADMM (the FedVRA paper's Algorithm 2), as classical consensus ADMM.

    Clients upload x_i and lambda_i (two vectors); the server keeps a copy of every lambda_i and sets
    x_0 = argmin_{x_0} sum_i w_i [<lambda_i, x_0 - x_i> + gamma/2 ||x_i - x_0||^2] over all clients, with
    x_i = x_0^r for the inactive ones. The server's sum_i w_i lambda_i is updated by the active clients' changes,
    sum_{i active} w_i (lambda_i^new - lambda_i^old), so a round costs O(K P), never an [N, P] block; the sum is
    accumulated in float64, so that hundreds of float32 updates do not drift from the sum they stand for."""

    name = "fedadmm"

    def __init__(self, gamma: float = 0.1):
        self.gamma = check_number("gamma", gamma, low=0.0, low_open=True)

    def init_server(self, task, x0):
        return FedADMMServer(x0.clone(), zero_rows(task.num_clients, x0), torch.zeros_like(x0, dtype=torch.float64))

    def init_clients(self, task, x0):
        return {"lam": zero_rows(task.num_clients, x0)}

    def local_objective(self, task, received, clients, info):
        return LocalObjective.sgd(received["x"], info.steps, info.lr, prox=self.gamma,
                                  linear=Negated(clients.entries("lam")))

    def client_update(self, task, received, clients, info, result):
        lam = clients["lam"] + self.gamma * (received["x"] - result.x)
        return {"lam": lam}, {"x": result.x, "lam": lam}

    def server_update(self, server, info, uploads):
        w = info.weights.to(server.x.dtype)
        old = ActiveClients({"lam": server.lam_copies}, info.clients.tolist())["lam"]  # [K, P]; [0, P] if none
        change = (uploads["lam"] - old).to(torch.float64)
        lam = server.lam + info.weights.to(device=change.device, dtype=torch.float64)[info.clients] @ change
        entries = replace_entries(server.lam_copies, info.clients, uploads["lam"])
        # sum_i w_i x_i with x_i = x_0 for the inactive clients
        model_sum = w.sum() * server.x + info.active_weights.to(w.dtype) @ (uploads["x"] - server.x)
        x = (self.gamma * model_sum - lam.to(w.dtype)) / (self.gamma * w.sum())
        return FedADMMServer(x, entries, lam)


@dataclass(frozen=True)
class FedDynServer(ServerState):
    h: torch.Tensor
    num_clients: int


@register
class FedDyn(Algorithm):
    """FedDyn (Acar et al., 2021) with its unweighted averages; ``alpha`` > 0. Client state: nabla_i."""

    name = "feddyn"

    def __init__(self, alpha: float = 0.1):
        self.alpha = check_number("alpha", alpha, low=0.0, low_open=True)

    def init_server(self, task, x0):
        return FedDynServer(x0.clone(), torch.zeros_like(x0), task.num_clients)

    def init_clients(self, task, x0):
        return {"grad": zero_rows(task.num_clients, x0)}

    def local_objective(self, task, received, clients, info):
        return LocalObjective.sgd(received["x"], info.steps, info.lr, prox=self.alpha,
                                  linear=Negated(clients.entries("grad")))

    def client_update(self, task, received, clients, info, result):
        return {"grad": clients["grad"] - self.alpha * delta(received, result)}, {"x": result.x}

    def server_update(self, server, info, uploads):
        if len(info.clients) == 0:
            return server
        x_local = uploads["x"]
        h = server.h - self.alpha * (x_local - server.x).sum(0) / server.num_clients
        return dataclasses.replace(server, x=x_local.mean(0) - h / self.alpha, h=h)
