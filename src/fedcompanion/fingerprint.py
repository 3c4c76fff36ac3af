"""The fingerprint of the code a run executes: what the results cache keys on besides the config.

A run's numbers can change only if the code it executes changes. So the fingerprint covers exactly that code:
the modules of the package that a run reaches from its roots (the run driver, its algorithm's classes, its task
builder, its dataset loader, its partitioner, its metrics), following the package's own imports, each taken as
*normalised source*: the module's syntax tree without docstrings (comments never reach the tree). Editing a
docstring or a comment, adding a module that no run imports, or changing one algorithm leaves every other run's
fingerprint as it was; changing FedVRA's update changes FedVRA's runs' and no others'.

An import ``from .pkg import name`` leads to the module that defines ``name``: a submodule of that name, or the
module the package's ``__init__`` re-exports it from, so a package that lists its members (like the algorithms'
registry) does not tie every member to every other. Imports inside functions count like the others. Code from
outside the package (a user's algorithm, loader or task) enters as its module's normalised source, or, for an
object defined in a notebook, as its own source (its compiled code where no source is kept).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import marshal
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

PACKAGE = __name__.rpartition(".")[0]
ROOT = Path(__file__).resolve().parent


def normalised(tree: ast.AST) -> str:
    """The syntax tree as text, without docstrings and source positions."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


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


@functools.cache
def _parsed(path: Path) -> tuple[str, tuple[ast.AST, ...]]:
    """(SHA-256 of the normalised source, the import statements) of one file, read once per process: a module is
    imported once too, so a file edited under a running kernel is not taken for the code that kernel runs."""
    tree = ast.parse(path.read_text())
    imports = tuple(n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return hashlib.sha256(normalised(tree).encode()).hexdigest(), imports


def _module(module: str) -> tuple[str, tuple[ast.AST, ...]]:
    return _parsed(module_file(module))


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if module_file(module).name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _definer(package: str, name: str, seen: frozenset = frozenset()) -> set[str]:
    """The modules that ``from package import name`` depends on."""
    if module_file(f"{package}.{name}") is not None:
        return {f"{package}.{name}"}
    path = module_file(package)
    if path is None or path.name != "__init__.py" or package in seen:
        return {package} if path is not None else set()
    for node in _module(package)[1]:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            source = _absolute(package, node)
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            return _definer(source, original, seen | {package}) if source.split(".")[0] == PACKAGE else set()
    return {package}  # defined in the __init__ itself


def imported(module: str) -> set[str]:
    """The package's modules that ``module`` imports (anywhere in it, function bodies included)."""
    out: set[str] = set()
    for node in _module(module)[1]:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if module_file(a.name) is not None}
        else:
            source = _absolute(module, node)
            if source.split(".")[0] == PACKAGE:
                for alias in node.names:
                    out |= _definer(source, alias.name) if alias.name != "*" else {source}
    return out


@functools.lru_cache(maxsize=256)
def closure(roots: frozenset[str]) -> tuple[str, ...]:
    """The package's modules reachable from ``roots`` by imports, sorted."""
    seen, todo = set(), list(roots)
    while todo:
        module = todo.pop()
        if module in seen or module_file(module) is None:
            continue
        seen.add(module)
        todo.extend(imported(module))
    return tuple(sorted(seen))


def _object_source(obj) -> str:
    """Normalised source of an object defined outside the package."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if path and path.endswith(".py") and module.__name__ != "__main__":
        return normalised_source(Path(path).read_text())
    try:
        return normalised_source(inspect.getsource(obj))
    except (OSError, TypeError, SyntaxError):  # no source kept (exec'd code), or a lambda inside a longer line
        if hasattr(obj, "__code__"):
            functions = [obj]
        else:  # a class (or an instance: its class): the compiled code of its methods
            cls = obj if isinstance(obj, type) else type(obj)
            functions = [v for v in vars(cls).values() if hasattr(v, "__code__")]
        return "".join(marshal.dumps(f.__code__).hex() for f in functions)


def fingerprint(roots: Iterable) -> str:
    """SHA-256 (first 12 hex digits) of the code reachable from ``roots``: module names of the package, or
    objects (classes, functions, instances), each counted by the module that defines it."""
    modules, outside = set(), set()
    for root in roots:
        if isinstance(root, str):
            modules.add(root)
            continue
        owner = getattr(root, "__module__", None) or type(root).__module__
        if module_file(owner) is not None:
            modules.add(owner)
        else:  # a set of (name, source): two notebook lambdas share a name, and each must count
            outside.add((f"{owner}:{getattr(root, '__qualname__', type(root).__qualname__)}", _object_source(root)))
    digest = hashlib.sha256()
    for module in closure(frozenset(modules)):
        digest.update(module.encode() + b"\0" + _module(module)[0].encode() + b"\0")
    for name, source in sorted(outside):
        digest.update(name.encode() + b"\0" + source.encode() + b"\0")
    return digest.hexdigest()[:12]

