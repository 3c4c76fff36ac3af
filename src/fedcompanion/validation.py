"""Early, named validation of user input (in the spirit of ``torch.optim``).

Every public entry point checks its arguments here so that a bad value fails at once with a
message that names the parameter and the allowed values, never deep inside a training loop.
"""
from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Iterable

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 3, 80, 80, 6, 6


def short(value) -> str:
    """``repr(value)``, cut to a readable length (an error message must not print a whole nested document)."""
    return _SHORT.repr(value)


class ConfigError(ValueError):
    """A parameter is outside its allowed range or of the wrong type."""


def check_number(name: str, value, *, low=None, high=None, low_open=False, integer=False):
    """Return ``value`` if it is a (real or integer) number within [low, high]; else raise.

    ``low_open=True`` makes the lower bound strict, e.g. a learning rate must be > 0.
    """
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a number"
        raise ConfigError(f"{name} must be {what}, got {short(value)} ({type(value).__name__})")
    if not integer and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    too_low = low is not None and (value <= low if low_open else value < low)
    if too_low or (high is not None and value > high):
        parts = [f"> {low}" if low_open else f">= {low}"] if low is not None else []
        parts += [f"<= {high}"] if high is not None else []
        raise ConfigError(f"{name} must be {' and '.join(parts)}, got {value!r}")
    return value


def check_choice(name: str, value, choices: Iterable):
    """Return ``value`` if it is one of ``choices``; else raise naming the allowed values."""
    choices = list(choices)
    if value not in choices:
        raise ConfigError(f"unknown {name} {short(value)}; choose one of {sorted(map(str, choices))}")
    return value


def check_device(device) -> str:
    """Return ``device`` as a string if torch knows it and it is available here; else raise naming it."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ConfigError(f"device must be 'cpu' or 'cuda' (optionally 'cuda:N'), got {device!r}") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r}: CUDA is not available on this machine; use device='cpu'")
    if kind not in ("cpu", "cuda"):
        raise ConfigError(f"device must be 'cpu' or 'cuda', got {device!r}")
    return str(device)
