r"""How much local work each client does and on which mini-batches.

* :class:`LocalWork` gives :math:`Q_i^r`, the number of local steps of client i in round r:
  a fixed count, a number of epochs over the client's data, or a fresh uniform draw from a range
  each round (the FedVRA paper's time-varying heterogeneous local updates, "HLU").
* :func:`batch_indices` gives the mini-batches. Each client's sample order is a stream of fresh
  permutations read ``batch_size`` at a time, seeded by ``(seed, round, client)`` only, so every
  algorithm and both engines see exactly the same mini-batches.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..validation import ConfigError, check_number


@dataclass(frozen=True)
class LocalWork:
    """Local steps per round. Give exactly one of ``steps``, ``epochs`` or ``steps_range``.

    Attributes:
        steps: Q_i^r = steps for everyone.
        epochs: Q_i^r = ceil(epochs * n_i / batch_size).
        steps_range: (low, high): Q_i^r ~ U{low..high}, drawn independently per client and round.
        batch_size: mini-batch size S; ``None`` means full-batch gradients.
        momentum: heavy-ball momentum mu of the local SGD (torch.optim.SGD's form), in [0, 1).
        weight_decay: weight decay omega >= 0 of the local SGD (added to the gradient, as torch.optim.SGD).
        momentum_reset: start each round's local work with a zero momentum buffer (``False``: each client
            carries its buffer across rounds, as the AdaFedAdam authors' code does).
    """

    steps: int | None = None
    epochs: float | None = None
    steps_range: tuple[int, int] | None = None
    batch_size: int | None = 32
    momentum: float = 0.0
    weight_decay: float = 0.0
    momentum_reset: bool = True

    def __post_init__(self):
        given = [k for k in ("steps", "epochs", "steps_range") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ConfigError(f"give exactly one of steps, epochs, steps_range (got {given or 'none'})")
        if self.steps is not None:
            check_number("local steps", self.steps, low=1, integer=True)
        if self.epochs is not None:
            check_number("local epochs", self.epochs, low=0, low_open=True, high=1e6)
        if self.steps_range is not None:
            if not isinstance(self.steps_range, (tuple, list)) or len(self.steps_range) != 2:
                raise ConfigError(f"steps_range must be a pair (low, high), got {self.steps_range!r}")
            lo, hi = self.steps_range
            check_number("steps_range low", lo, low=1, integer=True)
            check_number("steps_range high", hi, low=lo, integer=True)
        if self.batch_size is not None:
            check_number("batch_size", self.batch_size, low=1, integer=True)
        check_number("momentum", self.momentum, low=0.0, high=0.999999)
        check_number("weight_decay", self.weight_decay, low=0.0)
        if not isinstance(self.momentum_reset, bool):
            raise ConfigError(f"momentum_reset must be True or False, got {self.momentum_reset!r}")

    def steps_for(self, r: int, sizes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Q_i^r for all N clients (int64 [N]); ``rng`` is consumed once per round either way."""
        draws = rng.integers(*(self.steps_range or (1, 1)), endpoint=True, size=len(sizes))
        if self.steps is not None:
            return np.full(len(sizes), self.steps, dtype=np.int64)
        if self.steps_range is not None:
            return draws.astype(np.int64)
        batch = sizes if self.batch_size is None else np.minimum(self.batch_size, sizes)
        return np.maximum(1, np.ceil(self.epochs * sizes / batch)).astype(np.int64)


def batch_size_for(n: int, batch_size: int | None) -> int:
    """The mini-batch size a client with n rows uses: the whole data if batch_size is None, else at most n."""
    return n if batch_size is None else min(batch_size, n)


def batch_indices(seed: int, r: int, client: int, n: int, steps: int, batch_size: int | None) -> torch.Tensor:
    """Row indices [steps, B] into client ``client``'s data for round ``r`` (B = min(batch_size, n)).

    Full batch (``batch_size=None`` or >= n) uses every row at every step, in order.
    """
    b = batch_size_for(n, batch_size)
    if b == n:
        return torch.arange(n).expand(steps, n)
    rng = np.random.default_rng([seed, 3, r, client])
    needed = steps * b
    order = np.concatenate([rng.permutation(n) for _ in range(math.ceil(needed / n))])
    return torch.from_numpy(order[:needed].reshape(steps, b))
