"""Federated algorithms, one family per module, behind ``make(name, **hyperparameters)``."""
from . import adafedadam, ceadmm, fedavg, fedmgda, fednova, fedopt, fedvra, qfedavg, scaffold, two_block  # noqa: F401
from .base import REGISTRY, Algorithm, ServerState, make, register

__all__ = ["REGISTRY", "Algorithm", "ServerState", "make", "register"]
