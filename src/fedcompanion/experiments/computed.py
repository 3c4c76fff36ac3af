"""Computations that are not runs, cached like runs: what a notebook computes besides its configs' runs (a variance
trace, an identity over a grid, an SLSQP solve, the runs of a problem built in the notebook) is stored in
``<results>/computed/<hash>.json``, so that with the committed results a notebook re-executes in seconds and on any
CPU reads the numbers it committed.

:func:`computed` calls ``function(**arguments)`` once and keeps its value. The key is

    {"computation": the function's name, "code": fingerprint([function]), "arguments": arguments,
     "parameters": the notebook parameters the function reads}

* the code's fingerprint (:mod:`fedcompanion.infra.fingerprint`) covers the function's source, the notebook functions
and
  data globals it names and the package code it reaches (by name, or through a module's attributes:
  ``fc.tasks.federated_dataset_task``), so editing any of them computes the value again;
* ``arguments``: JSON data (numbers, strings, their lists and dicts), the computation's inputs;
* ``parameters``: the values the function, or a notebook function it names, reads from a parameters namespace
  (``P = fc.notebook.parameters(...)``; ``P.lr`` counts, ``P`` passed on to another function does not): the
  fingerprint covers code, not a namespace's values.

The value must be JSON data, a numpy array or number, or a pandas DataFrame; the value returned is always the one
read back from the stored JSON (Python's ``float`` repr round-trips exactly), so the first execution and every later
one see the same types and the same bits. The record holds the machine's numerical platform and the wall time, and
the SHA-256 of its fields: an edited or damaged record warns, naming the file, and is computed again. Each record
read is listed in the notebook's summary like a run (``runs_read``), so ``python -m fedcompanion.reproduction.prune``
finds the ones no notebook reads.
"""
from __future__ import annotations

import json
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..infra.atomic import write_atomic
from ..infra.fingerprint import PACKAGE, _code_names, fingerprint, global_names
from ..infra.machine import numerical_platform
from .cache import note_read, record_digest
from .config import key_hash

FOLDER = "computed"
VOUCHED = ("key", "value", "platform", "wall_time")


def _data(value: Any) -> Any:
    """``value`` as JSON data (a DataFrame as ``{"frame": [[column, values], ...]}``)."""
    if isinstance(value, pd.DataFrame):  # column by column: each keeps its type (ints stay ints)
        return {"frame": [[str(c), _data(value[c].tolist())] for c in value.columns]}
    if isinstance(value, np.ndarray):
        return _data(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_data(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"computed: a value of type {type(value).__name__} cannot be stored; return numbers, strings, "
                    "their lists and dicts, numpy arrays or a pandas DataFrame")


def _value(data: Any) -> Any:
    """The stored data back as the value: a stored frame becomes a DataFrame again."""
    if isinstance(data, dict) and set(data) == {"frame"} and isinstance(data["frame"], list):
        return pd.DataFrame(dict(data["frame"]))
    if isinstance(data, dict):
        return {k: _value(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_value(v) for v in data]
    return data


def _package_objects(module: types.ModuleType, names: set[str], depth: int = 3) -> list:
    """The package's functions and classes that code naming ``names`` reaches through ``module``'s attributes
    (``fc.tasks.federated_dataset_task``: the fingerprint follows names, not a module's attributes)."""
    found = []
    for name in sorted(names):
        value = getattr(module, name, None)
        if isinstance(value, types.ModuleType) and depth > 1 and value.__name__.startswith(PACKAGE):
            found += _package_objects(value, names, depth - 1)
        elif isinstance(value, (type, types.FunctionType)) and getattr(value, "__module__", "").startswith(PACKAGE):
            found.append(value)
    return found


def _reads(function: Callable, seen: set[int] | None = None) -> tuple[list, dict]:
    """What ``function`` reads besides its source, following the functions defined outside the package that it
    names: the package's functions and classes it reaches through a module's attributes (roots for the
    fingerprint), and the attributes it names of a parameters namespace (a global ``types.SimpleNamespace``:
    ``P.lr`` names "P" and "lr") with their values."""
    seen = set() if seen is None else seen
    if id(function) in seen or not hasattr(function, "__code__"):
        return [], {}
    seen.add(id(function))
    names, roots, parameters = _code_names(function.__code__), [], {}
    for name in sorted(global_names(function.__code__) & set(function.__globals__)):
        value = function.__globals__[name]
        if isinstance(value, types.SimpleNamespace):
            parameters[name] = _data({k: v for k, v in sorted(vars(value).items()) if k in names})
        elif isinstance(value, types.ModuleType) and value.__name__.startswith(PACKAGE):
            roots += _package_objects(value, names)
        elif isinstance(value, types.FunctionType) and not (value.__module__ or "").startswith(PACKAGE):
            more_roots, more_parameters = _reads(value, seen)
            roots += more_roots
            parameters.update(more_parameters)
    return roots, parameters


def computation_key(function: Callable, arguments: dict) -> dict:
    """The key :func:`computed` stores ``function(**arguments)`` under (see the module's docstring)."""
    roots, parameters = _reads(function)
    return {"computation": getattr(function, "__qualname__", repr(function)), "code": fingerprint([function, *roots]),
            "arguments": _data(arguments), "parameters": parameters}


def computed(function: Callable, results_dir: str | Path, *, refresh: bool = False, **arguments) -> Any:
    """``function(**arguments)``, computed once and read from ``<results_dir>/computed/`` afterwards (``refresh``:
    compute it again). See the module's docstring for what the key covers and what a value may be."""
    key = computation_key(function, arguments)
    name = key_hash(key)
    path = Path(results_dir) / FOLDER / f"{name}.json"
    note_read(name)
    if path.exists() and not refresh:
        try:
            record = json.loads(path.read_text())
            if record.get("key") == key and record.get("record") == record_digest(record, VOUCHED):
                return _value(record["value"])
            reason = "describes another computation" if record.get("key") != key else "does not match its digest"
        except (ValueError, UnicodeDecodeError, AttributeError) as error:
            reason = f"is not a valid record ({type(error).__name__})"
        warnings.warn(f"{path} {reason}; computing it again", stacklevel=2)
    start = time.perf_counter()
    data = _data(function(**arguments))
    record = {"key": key, "value": data, "platform": numerical_platform(),
              "wall_time": round(time.perf_counter() - start, 3)}
    record["record"] = record_digest(record, VOUCHED)
    write_atomic(path, json.dumps(record, sort_keys=True, allow_nan=True) + "\n")
    return _value(json.loads(path.read_text())["value"])
