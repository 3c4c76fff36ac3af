r"""FedAvgM: FedAvg with server momentum (Hsu, Qi and Brown, 2019, "Measuring the effects of non-identical data
distribution for federated visual classification").

Local work and uploads are FedAvg's (:math:`\Delta_i = x_i - x_0`). With the weighted mean of the uploads
:math:`\bar\Delta_t = \sum_{i\in A} c_i \Delta_i` (FedAvg's ``normalized`` or ``unbiased`` coefficients), the
server keeps a momentum buffer :math:`v` (:math:`v_{-1} = 0`) and steps

.. math::
    v_t = \beta\, v_{t-1} + \bar\Delta_t, \qquad x_{t+1} = x_t + \eta_g\, v_t,

i.e. heavy-ball SGD on the pseudo-gradient :math:`g_t = -\bar\Delta_t` (its buffer is the negated
:math:`v`). With :math:`\beta = 0` it is FedAvg,
bit for bit. Over many rounds of a constant :math:`\bar\Delta` the step approaches
:math:`\eta_g \bar\Delta / (1 - \beta)`: the effective server learning rate is :math:`\eta_g / (1 - \beta)`.
"""
from __future__ import annotations

from ..validation import check_number
from .base import register
from .fedavg import FedAvg
from .server_optimizers import sgd


@register
class FedAvgM(FedAvg):
    """FedAvgM. Hyperparameters: ``server_lr`` eta_g > 0, ``momentum`` beta in [0, 1), ``aggregation``.
    The server step is ``sgd(server_lr, momentum)``: FedAvg's, with the optimiser changed."""

    name = "fedavgm"

    def __init__(self, server_lr: float = 1.0, momentum: float = 0.9, aggregation: str = "normalized"):
        super().__init__(server_lr, aggregation)
        self.momentum = check_number("momentum", momentum, low=0.0, high=0.999999999)

    def server_optimizer(self):
        return sgd(self.server_lr, self.momentum)
