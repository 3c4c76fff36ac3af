"""Helpers for the parameterised notebooks: the smoke profile and typed, named parameter errors."""
from __future__ import annotations

import numbers
from pathlib import Path
from types import SimpleNamespace

from ..validation import ConfigError

PROFILES = ("paper", "smoke")


def resolve_parameters(profile: str, smoke: dict, defaults: dict | None = None, explicit=(),
                       **given) -> SimpleNamespace:
    """Check the notebook's parameters and apply the smoke profile.

    ``given`` are the values of the notebook's ``parameters`` cell (paper-scale defaults, or what papermill
    injected); ``defaults`` are that cell's literal values, the type specification: a given value whose type
    differs from its default's (an int is accepted for a float) raises :class:`ConfigError` naming it. Without
    ``defaults`` (a namespace with no parameters cell), ``smoke`` must hold a value for every parameter and is the
    specification. ``smoke`` holds the small values of the smoke profile, only where they differ; with
    ``profile='smoke'`` they replace the given ones except those in ``explicit`` (the names papermill was given:
    a value someone asked for by name is never silently replaced).

    It also sets torch to ``RUN_THREADS`` threads (one), as every run of a sweep is: what a notebook computes in its
    own kernel then does not depend on how many cores the machine has (float32 sums are split by thread), nor on how
    many notebooks ``make reproduce`` executes at a time.
    """
    import torch

    from ..experiments import RUN_THREADS

    if profile not in PROFILES:
        raise ConfigError(f"notebook parameter 'profile' must be one of {list(PROFILES)}, got {profile!r}")
    spec = defaults if defaults is not None else smoke
    missing = sorted(set(given) - set(spec))
    if missing:
        raise ConfigError(f"the smoke profile has no value for {missing}")
    undeclared_smoke = sorted(set(smoke) - set(spec))
    if undeclared_smoke:
        raise ConfigError(f"the smoke profile names {undeclared_smoke}, which the notebook's parameters cell does "
                          "not define")
    for source, values in (("notebook parameter", given), ("the smoke value of", smoke)):
        for name, value in values.items():
            expected = spec[name]
            if not _same_kind(value, expected):
                raise ConfigError(f"{source} {name!r} must be {_kind(expected)}, got {value!r} "
                                  f"({type(value).__name__})")
    values = dict(given)
    if profile == "smoke":
        values.update({name: value for name, value in smoke.items() if name not in set(explicit)})
    torch.set_num_threads(RUN_THREADS)
    return SimpleNamespace(profile=profile, **values)


def parameters(namespace: dict, smoke: dict) -> SimpleNamespace:
    """:func:`resolve_parameters` in one line of a notebook, ``P = fc.notebook.parameters(globals(), smoke=dict(...))``.

    The parameters are the names the notebook's parameters cell assigns (the last executed cell that starts with
    ``profile =``, read from IPython's input history ``In``; in a kernel that keeps none, as under nbval, the
    globals holding literals), their defaults that cell's values; ``smoke`` lists only
    the values the smoke profile changes. Names papermill injected must be parameters (a misspelled one would
    silently leave the default), and keep their injected values in the smoke profile too. Without a parameters cell
    in ``In`` (a plain namespace), the parameters are ``profile`` and the names ``smoke`` lists."""
    cells = namespace.get("In", [])
    defaults = parameters_cell(cells)
    if defaults is None and "In" in namespace:  # a kernel that keeps no input history (nbval executes so)
        defaults = literal_globals(namespace)
    declared = set(defaults) if defaults is not None else {"profile", *smoke}
    missing = sorted(name for name in declared if name not in namespace)
    if missing:
        raise ConfigError(f"the smoke profile names {missing}, which the notebook's parameters cell does not define")
    injected = injected_names(cells)
    unknown = sorted(injected - declared)
    if unknown:  # papermill injects whatever it is given: a misspelled name would silently leave the default
        raise ConfigError(f"notebook parameter {unknown[0]!r} is not one of this notebook's parameters "
                          f"{sorted(declared)}")
    given = {name: namespace[name] for name in declared - {"profile"}}
    spec = None if defaults is None else {k: v for k, v in defaults.items() if k != "profile"}
    return resolve_parameters(namespace["profile"], smoke, spec, injected, **given)


def _assigned(source: str) -> dict | None:
    """The top-level ``name = literal`` assignments of a cell's source (``None`` if it does not parse)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                raise ConfigError(f"notebook parameter {node.targets[0].id!r} must be a literal "
                                  f"(a number, string, bool or list), got {ast.unparse(node.value)!r}") from None
    return out


def parameters_cell(cells) -> dict | None:
    """The parameters cell's names and literal values: the last executed cell (``In``) whose source starts with
    ``profile =``, as every notebook's parameters cell does; ``None`` if there is none."""
    for source in reversed(list(cells)):
        if source.lstrip().startswith(("profile =", "profile=")):
            return _assigned(source)
    return None


def _literal(value) -> bool:
    if value is None or isinstance(value, (bool, numbers.Real, str)):
        return True
    return isinstance(value, (list, tuple)) and all(_literal(v) for v in value)


def literal_globals(namespace: dict) -> dict:
    """The parameters of a kernel that keeps no input history: the public globals holding literals (numbers,
    strings, bools, None, lists of them), as a parameters cell leaves them, beside the imports."""
    return {k: v for k, v in namespace.items() if not k.startswith("_") and k not in ("In", "Out") and _literal(v)}


def injected_names(cells) -> set[str]:
    """Names that papermill's injected cells among the executed ones (IPython's ``In``; papermill starts the cell it
    injects with ``# Parameters``) assign at top level."""
    names: set[str] = set()
    for source in cells:
        if source.startswith("# Parameters"):
            names |= set(_assigned(source) or {})
    return names


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
    root = Path(__file__).resolve().parents[3]
    return (root if (root / "pyproject.toml").exists() else Path.cwd()) / p
