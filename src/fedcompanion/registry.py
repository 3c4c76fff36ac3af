"""Registries by name, one kind each (algorithm, engine, task, dataset, partition, metric, model, loss, sampling),
that a user can extend.

A :class:`Registry` is a dict from name to entry with one way in, ``register(name, entry)`` (or, without the entry,
a decorator), which checks the entry with the kind's own rule, and a ``lookup`` that fails with the known names.
Every kind's public function, ``fc.register_<kind>(name, entry=None)``, is that method: the built-ins are
registered through it like a user's entries. What registers after the package's import is remembered as *user
entries*: a sweep with ``jobs > 1`` sends them to its worker processes (:func:`user_entries`,
:func:`restore`), so a dataset or algorithm registered in a notebook runs in parallel like a built-in one.
"""
from __future__ import annotations

import functools
import pickle
import sys
from collections.abc import Callable
from typing import Any

from .validation import ConfigError, check_choice

PACKAGE = __name__.rpartition(".")[0]
_ALL: dict[str, Registry] = {}
_SEALED = [False]  # set once the package has imported: what registers after that is a user's entry


class Registry(dict):
    """Name -> entry for one ``kind`` of thing. ``register(name, entry)`` or ``@register(name)``; ``lookup(name)``.

    ``check(name, entry)``: the kind's rule, raising :class:`ConfigError` on an entry it cannot run (and returning
    the entry to keep, e.g. an instance of a decorated class); ``None`` keeps every entry as it is."""

    def __init__(self, kind: str, check: Callable[[str, Any], Any] | None = None):
        super().__init__()
        self.kind, self.check = kind, check
        self.user: set[str] = set()  # names registered after the package's import
        _ALL[kind] = self

    def register(self, name: str, entry: Any = None, *, user: bool | None = None) -> Any:
        """Register ``entry`` under ``name`` (replacing an earlier one); without ``entry``, a decorator. ``user``:
        whether it is a user entry (default: registered after the package's import, as a notebook or a script does,
        with a function of its own or one of the package's; or defined outside the package)."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a {self.kind} is registered under a non-empty name (str), got {name!r}")
        if entry is None:
            return lambda obj: (self.register(name, obj, user=user), obj)[1]
        if self.check is not None:
            entry = self.check(name, entry)
        super().__setitem__(name, entry)
        if user is None:
            user = _SEALED[0] or any(module.split(".")[0] != PACKAGE for module in _modules(entry))
        (self.user.add if user else self.user.discard)(name)
        return entry

    def __setitem__(self, name: str, entry: Any) -> None:
        self.register(name, entry)

    def pop(self, name: str, *default) -> Any:
        """Remove ``name`` (a user's entry too) and return its entry."""
        self.user.discard(name)
        return super().pop(name, *default)

    def update(self, entries=(), /, *, user: bool | None = None) -> None:  # dict.update would bypass register
        """Register every entry of ``entries`` (a mapping), each checked by :meth:`register`."""
        for name, entry in dict(entries).items():
            self.register(name, entry, user=user)

    def lookup(self, name: str) -> Any:
        """The entry of ``name``, or a :class:`ConfigError` that names the known ones."""
        if not isinstance(name, str):
            raise ConfigError(f"{self.kind} must be a name (str), got {name!r} ({type(name).__name__})")
        check_choice(self.kind, name, self)
        return self[name]


def seal() -> None:
    """Mark the package's own registrations done (the package's ``__init__`` calls it last): every entry registered
    from then on is a user entry, which a sweep sends to its worker processes and a config keys by its content."""
    _SEALED[0] = True


def _modules(entry: Any) -> list[str]:
    """The modules that define ``entry``'s code: its own, or its parts' (an engine's (train, probe) pair, a
    ``functools.partial``)."""
    if isinstance(entry, tuple):
        return [m for part in entry for m in _modules(part)]
    if isinstance(entry, functools.partial):
        return _modules(entry.func)
    return [getattr(entry, "__module__", None) or type(entry).__module__]


def travel_problem(entry: Any) -> str | None:
    """Why ``entry`` cannot reach a spawned worker process, or ``None`` if it can: it must pickle, and pickle by
    reference to a module the worker can import (not a notebook cell's or ``python -c``'s ``__main__``)."""
    main = sys.modules.get("__main__")
    if "__main__" in _modules(entry) and getattr(main, "__file__", None) is None:
        return "it is defined interactively (a notebook cell or python -c), where worker processes cannot import it"
    try:
        pickle.dumps(entry)
    except Exception as exc:  # noqa: BLE001  (pickle raises several kinds)
        return f"{type(exc).__name__}: {exc}"
    return None


def registry(kind: str) -> Registry:
    """The registry of ``kind`` (``algorithm``, ``engine``, ``task``, ``dataset``, ``partition``, ``metric``,
    ``model``, ``loss``, ``sampling``)."""
    check_choice("registry kind", kind, _ALL)
    return _ALL[kind]


def user_entries(prepare: dict[str, Callable[[str, Any], Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Every user entry, by kind, made ready to travel to another process: ``prepare[kind](name, entry)`` may
    replace an entry (e.g. a dataset loader by the arrays it returns). Raises :class:`ConfigError` naming an entry
    that cannot travel (:func:`travel_problem`: define it in a module, or use jobs=1)."""
    out: dict[str, dict[str, Any]] = {}
    for kind, reg in _ALL.items():
        for name in sorted(reg.user):
            entry = reg[name]
            if prepare and kind in prepare:
                entry = prepare[kind](name, entry)
            problem = travel_problem(entry)
            if problem is not None:
                raise ConfigError(
                    f"the {kind} {name!r} cannot be sent to worker processes ({problem}); "
                    "define it in an importable module (a .py file) or run the sweep with jobs=1")
            out.setdefault(kind, {})[name] = entry
    return out


def restore(entries: dict[str, dict[str, Any]]) -> None:
    """Register ``entries`` (from :func:`user_entries`) in this process: a sweep worker's initializer."""
    for kind, named in entries.items():
        for name, entry in named.items():
            registry(kind).register(name, entry, user=True)
