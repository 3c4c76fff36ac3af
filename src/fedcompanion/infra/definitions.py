"""A Python file as a graph of its top-level definitions: what each statement binds, changes, reads and imports.

The cache key's fingerprint (:mod:`fedcompanion.infra.fingerprint`) walks these graphs from a run's roots. A statement
is a node: a function, a class (its methods included), an assignment, each name an import binds. It *binds* the names
it defines, and *changes* a module-level object it mutates (``X.update(...)``, ``X[k] = v``), except a
:class:`~fedcompanion.registry.Registry`, whose entries a run reaches through its config. It *reads* the module-level
names its body mentions (``name`` and ``name.attribute``, the latter resolved inside a module it names), and
*imports* what its function bodies import. A script's ``if __name__ == "__main__":`` block and docstrings are no
nodes: no run executes them; nor are error messages (``raise E(message)``, ``assert test, message``): a reworded
message changes no number.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path


def normalised(tree: ast.AST) -> str:
    """The syntax tree as text, without docstrings, source positions and the messages of ``raise`` and ``assert``
    (a reworded error changes no number; the exception's type and where it is raised stay in the text)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            node.exc.args, node.exc.keywords = [], []
        elif isinstance(node, ast.Assert):
            node.msg = None
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


@dataclass
class Statement:
    text: str                                    # normalised source
    line: str                                    # its first line, for reading
    uses: set = field(default_factory=set)       # module-level names it reads
    attributes: dict = field(default_factory=dict)  # name -> attributes read from it (name.attr)
    inner: list = field(default_factory=list)    # (module, name or None) its function bodies import


@dataclass
class Graph:
    module: str
    is_package: bool
    statements: list = field(default_factory=list)
    binders: dict = field(default_factory=dict)  # name -> indices of the statements that bind or change it
    imports: dict = field(default_factory=dict)  # name -> (module, original name or None for a module)
    registries: set = field(default_factory=set)  # names bound to a Registry
    stars: list = field(default_factory=list)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _imported(module: str, is_package: bool, node, follows) -> list[tuple[str, str, str | None]]:
    """(bound name, module, original name or None for a module) of an import statement, for the modules
    ``follows(name)`` says are followed."""
    out = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if follows(alias.name) is not None:
                out.append(((alias.asname or alias.name).split(".")[0],
                            alias.name if alias.asname else alias.name.split(".")[0], None))
        return out
    source = _absolute(module, is_package, node)
    if source.split(".")[0] == "__future__":
        return out
    for alias in node.names:
        if alias.name == "*":
            out.append(("*", source, "*"))
        elif follows(f"{source}.{alias.name}") is not None:
            out.append((alias.asname or alias.name, f"{source}.{alias.name}", None))
        elif follows(source) is not None:
            out.append((alias.asname or alias.name, source, alias.name))
    return out


def _bound(stmt: ast.stmt) -> set[str]:
    """The module-level names a statement binds."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}
    names = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not stmt:
            names.add(node.name)
    return names


def _changed(stmt: ast.stmt) -> str | None:
    """The module-level name an expression statement or an item/attribute assignment changes (``X.update(...)``,
    ``X[k] = v``, ``X.a += 1``), if any."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        target = stmt.value.func
    elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        target = next((t for t in targets if isinstance(t, (ast.Attribute, ast.Subscript))), None)
    else:
        return None
    while isinstance(target, (ast.Attribute, ast.Subscript, ast.Call)):
        target = target.func if isinstance(target, ast.Call) else target.value
    return target.id if isinstance(target, ast.Name) else None


def _is_main_guard(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and "__main__" in ast.dump(stmt.test)


def _is_registry(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Call) \
        and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "Registry"


def _statement(module: str, is_package: bool, stmt: ast.stmt, follows) -> Statement:
    out = Statement(normalised(ast.Module(body=[stmt], type_ignores=[])), ast.unparse(stmt).split("\n")[0])
    under_attribute = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            out.attributes.setdefault(node.value.id, set()).add(node.attr)
            under_attribute.add(id(node.value))
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and node is not stmt:
            out.inner += [(m, name) for _, m, name in _imported(module, is_package, node, follows)]
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and id(node) not in under_attribute:
            out.uses.add(node.id)
    return out


def _one_name_per_import(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` with each import of several names split into one import per name: a name added to an import
    statement is a node of its own, so it changes nothing for the definitions that read the statement's other
    names."""
    out = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and len(stmt.names) > 1:
            for alias in stmt.names:
                one = ast.Import(names=[alias]) if isinstance(stmt, ast.Import) else \
                    ast.ImportFrom(module=stmt.module, names=[alias], level=stmt.level)
                out.append(ast.copy_location(one, stmt))
        else:
            out.append(stmt)
    return out


@functools.cache
def graph_of(path: Path, module: str, follows, *version) -> Graph:
    """The definitions graph of the file ``path`` (module ``module``), read once per ``version``: the package's
    files once per process (a module is imported once too, so a file edited under a running kernel is not taken for
    the code that kernel runs), a user's once per modification time."""
    tree = ast.parse(path.read_text())
    graph = Graph(module, path.name == "__init__.py")
    for stmt in _one_name_per_import(tree.body):
        if _is_main_guard(stmt) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            continue  # a script's entry point and docstrings: no run executes them
        index = len(graph.statements)
        graph.statements.append(_statement(module, graph.is_package, stmt, follows))
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for name, source, original in _imported(module, graph.is_package, stmt, follows):
                if original == "*":
                    graph.stars.append(source)
                else:
                    graph.imports[name] = (source, original)
        if _is_registry(stmt):
            graph.registries |= _bound(stmt)
        for name in _bound(stmt):
            graph.binders.setdefault(name, []).append(index)
        changed = _changed(stmt)
        if changed is not None and changed not in graph.registries:  # a registry's entries: through configs
            graph.binders.setdefault(changed, []).append(index)
    return graph
