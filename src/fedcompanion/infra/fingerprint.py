"""The fingerprint of the code a run executes: what the results cache keys on besides the config.

A run's numbers can change only if the code it executes changes, so the fingerprint covers that code and nothing
else, at the level of *top-level definitions*: a function, a class (its methods included), a constant, an import.
It starts from a run's roots (the run driver; its algorithm's classes; its engine; its task builder, dataset loader
and partitioner; its metrics: the entries its config names) and follows the names each definition uses, inside the
package and into a user's own modules, taking each definition as *normalised source* (its syntax tree without
docstrings; comments never reach the tree). So:

* editing a docstring or a comment, or adding a function, a partition, an engine or a task, leaves every run's
  fingerprint as it was;
* changing one algorithm changes its runs' fingerprints and no others'; changing an engine's kernel changes the
  runs on that engine, not the ADMM family's (which never reaches an engine);
* a user's module counts by what its definitions use: the package code it imports, its own helpers and module-level
  constants, the user modules it imports (for code defined in a notebook or ``python -c``: the object's source and
  the values of the globals its code names).

**Registries are opaque.** A name bound to a :class:`~fedcompanion.registry.Registry` (``TASKS``, ``ENGINES``, ...)
leads to the registry, not to its entries: which entry a run uses is in its config, and the config's key adds that
entry as a root. Statements that change a plain module-level object (``X.update(...)``, ``X[k] = v``) belong to
``X``'s definition. Package code never looks a built-in entry up by a constant name (it calls it), so no entry is
reached without its name being in the config.
"""
from __future__ import annotations

import ast
import dis
import functools
import hashlib
import importlib.util
import inspect
import marshal
import sys
import sysconfig
import textwrap
import types
from collections.abc import Iterable
from pathlib import Path

from .definitions import Graph, graph_of, normalised

PACKAGE = __name__.split(".")[0]
ROOT = Path(__file__).resolve().parents[1]  # the package's folder
_SIMPLE = (int, float, complex, str, bytes, bool, type(None))


def normalised_source(source: str) -> str:
    """``source`` (Python code) normalised: two sources that differ only in comments, docstrings or layout give
    the same text."""
    return normalised(ast.parse(textwrap.dedent(source)))


def module_file(module: str) -> Path | None:
    """The source file of a module of the package (``fedcompanion.engine.batched`` -> engine/batched.py), if any."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = ROOT.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


_LIBRARY = tuple(str(Path(p).resolve()) for p in {sysconfig.get_paths()[k] for k in ("stdlib", "purelib",
                                                                                       "platlib")})


@functools.lru_cache(maxsize=1)
def _distributions() -> dict:
    """Top-level import name -> the installed distributions that provide it (read once per process)."""
    from importlib import metadata

    return metadata.packages_distributions()


@functools.cache
def _installed_files(top: str) -> frozenset:
    """The files that installed distributions ship under the top-level import name ``top`` (resolved paths): an
    editable install ships none of its sources (only a ``.pth`` or a finder), so its code stays the user's."""
    from importlib import metadata

    files = set()
    for name in _distributions().get(top, ()):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        files |= {str(Path(dist.locate_file(f)).resolve()) for f in dist.files or () if str(f).endswith(".py")}
    return frozenset(files)


def user_file(module: str) -> Path | None:
    """The source file of a user's module, found without importing it where it is already imported: not the
    package's, not the standard library's, and not a file an installed distribution ships, wherever it is installed
    (site-packages, a folder on ``PYTHONPATH``, ``pip install --target``, a distribution's dist-packages, a conda
    overlay): a user's module is one of their own files, or of a project of theirs installed in editable mode."""
    if module.split(".")[0] in (PACKAGE, "__main__") or not module:
        return None
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    if path is None and loaded is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        path = getattr(spec, "origin", None)
    if not path or not str(path).endswith(".py"):
        return None
    path = Path(path).resolve()
    if str(path).startswith(_LIBRARY) or str(path) in _installed_files(module.split(".")[0]):
        return None
    return path


def _source_file(module: str) -> Path | None:
    return module_file(module) or user_file(module)


def _graph(module: str) -> Graph | None:
    path = module_file(module)
    if path is not None:
        return graph_of(path, module, _source_file)
    path = user_file(module)  # a user's file may be edited and reloaded: read again when it changes
    return None if path is None else graph_of(path, module, _source_file, path.stat().st_mtime_ns,
                                               path.stat().st_size)


# ---------------------------------------------------------------------------------------------- reaching
class _Walk:
    """The statements reachable from a set of (module, name) pairs (name None: the whole module)."""

    def __init__(self):
        self.reached: set[tuple[str, int]] = set()
        self.seen: set[tuple[str, str | None]] = set()
        self.todo: list[tuple[str, str | None]] = []

    def add(self, module: str, name: str | None) -> None:
        if (module, name) not in self.seen:
            self.seen.add((module, name))
            self.todo.append((module, name))

    def run(self) -> None:
        while self.todo:
            module, name = self.todo.pop()
            graph = _graph(module)
            if graph is None:
                continue
            if name is None:
                indices = range(len(graph.statements))
            elif name in graph.binders:
                indices = graph.binders[name]
            else:  # not bound here: a star import's, or a submodule's; else (dynamic) the whole module
                if graph.stars:
                    for star in graph.stars:
                        self.add(star, name)
                    continue
                if _source_file(f"{module}.{name}") is not None:
                    self.add(f"{module}.{name}", None)
                    continue
                indices = range(len(graph.statements))
            for index in indices:
                self._statement(graph, index)

    def _statement(self, graph: Graph, index: int) -> None:
        if (graph.module, index) in self.reached:
            return
        self.reached.add((graph.module, index))
        stmt = graph.statements[index]
        for source, original in stmt.inner:
            self.add(source, original)
        for name in stmt.uses | set(stmt.attributes):
            self._use(graph, name, stmt.attributes.get(name, set()), bare=name in stmt.uses)

    def _use(self, graph: Graph, name: str, attributes: set, bare: bool) -> None:
        target = graph.imports.get(name)
        if target is not None and target[1] is None:  # a module: the attributes read from it, or all of it
            if bare:
                self.add(target[0], None)
            for attribute in attributes:
                self.add(target[0], attribute)
            return
        if target is not None:  # a definition imported from another module: the import and the definition
            self.add(*target)
        if name in graph.binders:
            self.add(graph.module, name)
        elif graph.stars:
            for star in graph.stars:
                self.add(star, name)

    def digest_into(self, digest) -> None:
        for module, index in sorted(self.reached):
            graph = _graph(module)
            digest.update(module.encode() + b"\0" + graph.statements[index].text.encode() + b"\0")
            if module_file(module) is None:
                digest.update(_live_values(graph, index))


def _live_values(graph: Graph, index: int) -> bytes:
    """The values that a user's module's statement ``index`` binds, as they are now in this process: a notebook that
    reassigns a constant of an imported module (``mymodule.SCALE = 0.5``) runs other numbers than the file says, so
    the key takes the value the run will read (data values: numbers, strings, their tuples, tensors, arrays)."""
    live = sys.modules.get(graph.module)
    if live is None:
        return b""
    texts = []
    for name, indices in sorted(graph.binders.items()):
        if index in indices and hasattr(live, name):
            text = _value_text(getattr(live, name))
            if text is not None:
                texts.append(f"{name}={text}")
    return "\0".join(texts).encode() + b"\0"


def _top_name(obj) -> str | None:
    """The module-level name under which ``obj`` (a function or class) is defined, if it has one."""
    qualname = getattr(obj, "__qualname__", None)
    if not qualname or "<" in qualname.split(".")[0]:
        return None
    return qualname.split(".")[0]


def _outside_source(obj) -> str:
    """Normalised source of an object with no module file to read (a notebook's, ``python -c``'s)."""
    try:
        return normalised_source(inspect.getsource(obj))
    except (OSError, TypeError, SyntaxError):  # no source kept (exec'd code), or a lambda inside a longer line
        return "".join(marshal.dumps(f.__code__).hex() for f in _functions(obj))


def _functions(obj) -> list:
    if hasattr(obj, "__code__"):
        return [obj]
    cls = obj if isinstance(obj, type) else type(obj)
    return [v for k in cls.__mro__ if k.__module__ == cls.__module__ for v in vars(k).values()
            if hasattr(v, "__code__")]


def _code_names(code: types.CodeType) -> set[str]:
    """Every name ``code`` (and the code nested in it) uses: globals and attributes (``x.lr`` names "lr")."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def global_names(code: types.CodeType) -> set[str]:
    """The global names ``code`` (and the code nested in it) reads or binds; not its attributes: ``play_round(...)
    .state`` does not read a global ``state``, whose value (and its repr) must not enter a key."""
    names = {i.argval for i in dis.get_instructions(code)
             if i.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def _value_text(value) -> str | None:
    """A stable text of a module-level value a user's code reads (a constant, a tensor, an array), if it is data."""
    import numpy as np
    import torch

    if isinstance(value, _SIMPLE):
        return repr(value)
    if isinstance(value, (tuple, list, frozenset, set)) and all(isinstance(v, _SIMPLE) for v in value):
        return repr(sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value)
    if isinstance(value, dict) and all(isinstance(v, _SIMPLE) for v in (*value, *value.values())):
        return repr(sorted(value.items(), key=repr))
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        return f"tensor{t.dtype}{tuple(t.shape)}" + hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy()).hexdigest()
    if isinstance(value, np.ndarray):
        return f"array{value.dtype}{value.shape}" + hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    return None


class _Roots:
    """Collects roots: package or user-file definitions (walked), and the texts of code and data with no file."""

    def __init__(self):
        self.walk = _Walk()
        self.texts: set[tuple[str, str]] = set()
        self._objects: set[int] = set()

    def add(self, root) -> None:
        if isinstance(root, str):  # a module name: all of it
            self.walk.add(root, None)
            return
        if id(root) in self._objects:
            return
        self._objects.add(id(root))
        if isinstance(root, (tuple, list)):
            for item in root:
                self.add(item)
            return
        if isinstance(root, functools.partial):
            self.add(root.func)
            for value in (*root.args, *root.keywords.values()):
                self._value(f"partial:{getattr(root.func, '__qualname__', '')}", value)
            return
        if isinstance(root, types.MethodType):
            root = root.__func__
        obj = root if isinstance(root, (type, types.FunctionType)) else type(root)
        owner = getattr(obj, "__module__", None) or ""
        name = _top_name(obj)
        if _source_file(owner) is not None:
            self.walk.add(owner, name)  # name None (a lambda, a nested function): the whole module
        else:  # defined in __main__ without a file, a notebook, or exec'd code
            self._outside(obj)

    def _outside(self, obj) -> None:
        label = f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', type(obj).__qualname__)}"
        self.texts.add((label, _outside_source(obj)))
        if isinstance(obj, type):
            for base in obj.__mro__[1:-1]:
                self.add(base)
        for function in _functions(obj):
            for name in sorted(global_names(function.__code__) & set(function.__globals__)):
                self._value(f"{label}.{name}", function.__globals__[name])

    def _value(self, label: str, value) -> None:
        text = _value_text(value)
        if text is not None:
            self.texts.add((label, text))
        elif isinstance(value, types.ModuleType):
            if _source_file(value.__name__) is not None:
                self.walk.add(value.__name__, None)
        elif isinstance(value, (type, types.FunctionType, functools.partial, types.MethodType, tuple, list)):
            self.add(value)
        elif getattr(type(value), "__module__", "").split(".")[0] in (PACKAGE, "__main__"):
            self.add(type(value))
            self.texts.add((label, repr(value)))

    def digest(self) -> str:
        self.walk.run()
        digest = hashlib.sha256()
        self.walk.digest_into(digest)
        for label, text in sorted(self.texts):
            digest.update(label.encode() + b"\0" + text.encode() + b"\0")
        return digest.hexdigest()[:12]


def in_package(root) -> bool:
    """Whether ``root`` is the package's own code (its fingerprint can be kept for the process's lifetime)."""
    if isinstance(root, str):
        return True
    if isinstance(root, tuple):
        return all(in_package(r) for r in root)
    if isinstance(root, functools.partial):
        return in_package(root.func) and all(isinstance(v, _SIMPLE) for v in (*root.args,
                                                                              *root.keywords.values()))
    return isinstance(root, (type, types.FunctionType)) and module_file(root.__module__ or "") is not None


def _collect(roots) -> _Roots:
    collected = _Roots()
    for root in roots:
        collected.add(root)
    return collected


@functools.lru_cache(maxsize=1024)
def _package_fingerprint(roots: tuple) -> str:
    return _collect(roots).digest()


def fingerprint(roots: Iterable) -> str:
    """SHA-256 (first 12 hex digits) of the code reachable from ``roots``: module names (all of the module), or
    objects (classes, functions, engines' tuples and partials, instances: their class), each followed through the
    definitions it uses. The package's own roots are fingerprinted once per process; a user's every time (their
    globals may have changed)."""
    roots = tuple(roots)
    if all(in_package(r) for r in roots):
        return _package_fingerprint(roots)
    return _collect(roots).digest()


def clear() -> None:
    """Forget every file read and fingerprint taken (for tests that edit a scratch copy of the package)."""
    _package_fingerprint.cache_clear()
    graph_of.cache_clear()
    _distributions.cache_clear()
    _installed_files.cache_clear()


def reached(roots: Iterable) -> list[tuple[str, str]]:
    """The (module, first line of the statement's source) pairs the fingerprint of ``roots`` covers, for
    inspection: ``python -c "from fedcompanion.infra.fingerprint import reached; ..."``."""
    collected = _collect(roots)
    collected.walk.run()
    return sorted({(m, _graph(m).statements[i].line) for m, i in collected.walk.reached})


def imported(module: str) -> set[str]:
    """The package's modules that ``module`` imports (anywhere in it, function bodies included)."""
    graph = _graph(module)
    out = {source for source, _ in graph.imports.values()} | set(graph.stars)
    out |= {source for stmt in graph.statements for source, _ in stmt.inner}
    return {m for m in out if module_file(m) is not None}
