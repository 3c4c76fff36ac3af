"""Federated algorithms, one family per module, behind ``make(name, **hyperparameters)``."""
from . import ceadmm, fedavg, fedvra, scaffold, two_block  # noqa: F401  (registers)
from .base import REGISTRY, Algorithm, ServerState, make, register

__all__ = ["REGISTRY", "Algorithm", "ServerState", "make", "register"]
