"""Early, named validation of user input (in the spirit of ``torch.optim``).

Every public entry point checks its arguments here so that a bad value fails at once with a
message that names the parameter and the allowed values, never deep inside a training loop.
"""
from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Iterable
from dataclasses import dataclass

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 3, 80, 80, 6, 6


def short(value) -> str:
    """``repr(value)``, cut to a readable length (an error message must not print a whole nested document)."""
    return _SHORT.repr(value)


class ConfigError(ValueError):
    """A parameter is outside its allowed range or of the wrong type."""


# The largest seed: a signed 64-bit integer, which every generator a run seeds (torch's, numpy's) accepts.
MAX_SEED = 2**63 - 1


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


@dataclass(frozen=True)
class Rule:
    """The allowed range of a numeric argument: within [low, high] (``low_open``: strictly above ``low``), an integer
    if ``integer``, and ``None`` allowed if ``optional`` (it then means: not used, or the default)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    integer: bool = False
    optional: bool = False


ARGUMENTS = {  # the one statement of each run argument's rule, read by fc.run and by ExperimentConfig alike
    "rounds": Rule(low=1, integer=True),
    "seed": Rule(low=0, high=MAX_SEED, integer=True),
    "eval_every": Rule(low=1, integer=True),
    "divergence_factor": Rule(low=1.0, optional=True),
    "tol": Rule(low=0.0, low_open=True, optional=True),
    "lr": Rule(low=0.0, low_open=True),
    "clients_per_round": Rule(low=1, integer=True, optional=True),
    "threads": Rule(low=1, integer=True, optional=True),
}


def check_argument(name: str, value, *, high=None):
    """Return ``value`` if it obeys the rule :data:`ARGUMENTS` declares for the run argument ``name`` (``high``: a
    bound this call adds, e.g. the task's number of clients); else raise naming it and its range."""
    rule = ARGUMENTS[name]
    if value is None and rule.optional:
        return None
    bounds = [b for b in (rule.high, high) if b is not None]
    return check_number(name, value, low=rule.low, high=min(bounds) if bounds else None, low_open=rule.low_open,
                        integer=rule.integer)


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


def check_seeds(name: str, seeds, *, least: int = 1) -> tuple[int, ...]:
    """Return ``seeds`` as a tuple if it holds at least ``least`` distinct integers >= 0; else raise. A seed listed
    twice would be paired with itself (a zero-width interval from one seed), so repeats are refused, not dropped."""
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise ConfigError(f"{name} must be a list of integer seeds, got {short(seeds)}")
    seeds = tuple(seeds)
    for s in seeds:
        check_number(f"{name} entry", s, low=0, integer=True)
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"{name} {list(seeds)} lists seed(s) {repeated} more than once; each seed is one replicate")
    if len(seeds) < least:
        raise ConfigError(f"{name} needs at least {least} seeds, got {list(seeds)}")
    return tuple(int(s) for s in seeds)


def check_grid(name: str, values) -> list[float]:
    """Return ``values`` as floats if they are finite, strictly increasing and distinct at 3 significant digits
    (the precision settings are named and reported with); else raise naming ``name`` and the offending values."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ConfigError(f"grid {name} must be a list of numbers, got {short(values)}")
    values = [float(check_number(f"grid {name} entry", v)) for v in values]
    if not values:
        raise ConfigError(f"grid {name} is empty")
    shown = [f"{v:.3g}" for v in values]
    same = sorted({s for s in shown if shown.count(s) > 1})
    if same:
        raise ConfigError(f"grid {name} {values} repeats the value(s) {same} at 3 significant digits")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ConfigError(f"grid {name} must be increasing, got {values}")
    return values
