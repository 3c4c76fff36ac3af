"""Diagnostics: the package reports through :mod:`logging`, under the ``fedcompanion`` logger and its children
(``fedcompanion.flower``, ...), never by printing them. In a user's program or notebook, the user's logging
configuration decides where they go. The package's entry points (the ``fedcompanion`` command, the loopback
federation and the Flower ServerApp, whose process configures no handler for it) call :func:`configure` once so
that they reach standard error with their level and source. What a command prints as its answer (a table, a path)
stays ``print``.
"""
from __future__ import annotations

import logging
import sys

LOGGER = "fedcompanion"
FORMAT = "%(levelname)s %(name)s: %(message)s"


def configure(level: int = logging.INFO) -> logging.Logger:
    """Give the package's logger one handler to standard error at ``level`` (once: a second call changes only the
    level). For a process the package owns: its records no longer propagate to the root logger's handlers."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
        logger.propagate = False
    return logger
