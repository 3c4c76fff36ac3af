"""Helpers for the parameterised notebooks: the smoke profile and typed, named parameter errors."""
from __future__ import annotations

import numbers
from pathlib import Path
from types import SimpleNamespace

from .validation import ConfigError

PROFILES = ("paper", "smoke")


def resolve_parameters(profile: str, smoke: dict, **given) -> SimpleNamespace:
    """Check the notebook's parameters and apply the smoke profile.

    ``given`` are the values of the notebook's ``parameters`` cell (paper-scale defaults, or what
    papermill injected). ``smoke`` holds the small values of the smoke profile for *every*
    parameter and so doubles as the type specification: a given value whose type differs from
    the smoke value's (an int is accepted for a float) raises :class:`ConfigError` naming it.
    With ``profile='smoke'`` the smoke values replace the given ones.

    It also sets torch to ``RUN_THREADS`` threads (one), as every run of a sweep is: what a notebook computes in its
    own kernel then does not depend on how many cores the machine has (float32 sums are split by thread), nor on how
    many notebooks ``make reproduce`` executes at a time.
    """
    import torch

    from .experiments import RUN_THREADS

    if profile not in PROFILES:
        raise ConfigError(f"notebook parameter 'profile' must be one of {list(PROFILES)}, got {profile!r}")
    missing = sorted(set(given) - set(smoke))
    if missing:
        raise ConfigError(f"the smoke profile has no value for {missing}")
    for name, value in given.items():
        expected = smoke[name]
        if not _same_kind(value, expected):
            raise ConfigError(
                f"notebook parameter {name!r} must be {_kind(expected)}, "
                f"got {value!r} ({type(value).__name__})"
            )
    values = dict(given, **smoke) if profile == "smoke" else dict(given)
    torch.set_num_threads(RUN_THREADS)
    return SimpleNamespace(profile=profile, **values)


def parameters(namespace: dict, smoke: dict) -> SimpleNamespace:
    """:func:`resolve_parameters` in one line of a notebook, ``P = fc.notebook.parameters(globals(), smoke=dict(...))``:
    the given values are the namespace's values of ``profile`` and of every name the smoke profile lists (the
    ``parameters`` cell's names, as papermill may have replaced them)."""
    missing = sorted(name for name in ("profile", *smoke) if name not in namespace)
    if missing:
        raise ConfigError(f"the smoke profile names {missing}, which the notebook's parameters cell does not define")
    unknown = sorted(undeclared(namespace.get("In", []), {"profile", *smoke}))
    if unknown:  # papermill injects whatever it is given: a misspelled name would silently leave the default
        raise ConfigError(f"notebook parameter {unknown[0]!r} is not one of this notebook's parameters "
                          f"{sorted({'profile', *smoke})}")
    return resolve_parameters(namespace["profile"], smoke, **{name: namespace[name] for name in smoke})


def undeclared(cells, declared: set[str]) -> set[str]:
    """Names that papermill's injected cells among the executed ones (IPython's ``In``; papermill starts the cell it
    injects with ``# Parameters``) assign at top level and that are not ``declared`` parameters."""
    import ast

    names = set()
    for source in cells:
        if not source.startswith("# Parameters"):
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                names.add(node.targets[0].id)
    return names - declared


def _kind(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "a bool (True or False)"
    if isinstance(value, numbers.Integral):
        return "an int"
    if isinstance(value, numbers.Real):
        return "a number"
    return f"a {type(value).__name__}"


def _same_kind(value, expected) -> bool:
    if isinstance(expected, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(expected, bool)
    if isinstance(expected, numbers.Integral):
        return isinstance(value, numbers.Integral)
    if isinstance(expected, numbers.Real):
        return isinstance(value, numbers.Real)
    if isinstance(expected, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(expected))


def project_path(path: str) -> Path:
    """A relative ``path`` is taken from the repository root (where ``pyproject.toml`` is), so a
    notebook writes to the same ``results/`` and ``figures/`` whether JupyterLab or papermill runs it."""
    p = Path(path)
    if p.is_absolute():
        return p
    root = Path(__file__).resolve().parents[2]
    return (root if (root / "pyproject.toml").exists() else Path.cwd()) / p
