"""Federated algorithms, one family per module, behind ``make(name, **hyperparameters)``.

Every module of this package is imported here, so that its ``@register`` runs: a new algorithm is a new module
(and its test), with nothing to add to this file.
"""
import importlib as _importlib
import pkgutil as _pkgutil

from .base import REGISTRY, Algorithm, ServerState, make, register, register_algorithm

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    _importlib.import_module(f"{__name__}.{_module}")

__all__ = ["REGISTRY", "Algorithm", "ServerState", "make", "register", "register_algorithm"]
