"""The package's layers, read from its own imports (the same reader as the cache's fingerprint).

The folders draw the architecture: ``infra/`` (files, processes, the machine, logs, the code's fingerprint) at the
bottom, the federated-learning core at the package root (the protocol, losses, models, the engines, the algorithms,
the driver, tasks, data, experiments, Flower), and ``reproduction/`` on top (the papers' declarations, the verdict
rule, the claims and their evidence, figures, the report, the site, reproduce, verify). A folder never imports one
above it: infra imports nothing of the package's, the core never imports ``reproduction/``; only the public face
(the package's ``__init__`` and its command line) may reach every folder. Within each folder, a module imports only
modules of its own layer or a lower one; the engines and the algorithms never import each other (both meet in the
protocol, and the driver stands above them); no two modules import each other, through any chain, not even lazily or
for annotations only; no module is longer than 400 lines."""
from __future__ import annotations

import ast
import graphlib

import pytest

from fedcompanion.infra import fingerprint

FOLDERS = ["infra", "core", "reproduction"]  # lowest first
FACE = {"cli"}  # the command line: the public face, above every folder
LAYERS = {  # within a folder, lowest first; a name covers a module or a subpackage and everything in it
    "infra": [["atomic", "definitions", "logs", "machine", "memory", "processes"], ["fingerprint"]],
    "core": [["protocol", "validation", "registry", "metrics", "linalg"], ["data", "losses", "models", "engine"],
             ["tasks"], ["algorithms"], ["driver", "settings"], ["experiments"], ["flower"]],
    "reproduction": [["papers", "rule"], ["plots"], ["verdict_figures", "claims", "notebook", "timings", "verify",
                                                      "arena"], ["report", "rekey", "prune"], ["reproduce", "site"]],
}


def _modules() -> list[str]:
    out = []
    for path in sorted(fingerprint.ROOT.rglob("*.py")):
        parts = list(path.relative_to(fingerprint.ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:  # the package's own __init__ only hands names on
            out.append(".".join(parts))
    return out


def folder(module: str) -> str:
    """The folder of ``module`` (a name relative to the package): ``infra``, ``reproduction``, or ``core``."""
    head = module.split(".")[0]
    return head if head in ("infra", "reproduction") else "face" if head in FACE else "core"


def layer(module: str) -> tuple[int, int]:
    """(folder, layer within it) of ``module``: an import may only go to a smaller or equal pair."""
    where = folder(module)
    if where == "face":
        return len(FOLDERS), 0
    inner = module.split(".")[1] if where != "core" and "." in module else module.split(".")[0]
    if inner in ("infra", "reproduction"):  # the folder's own face (its __init__)
        return FOLDERS.index(where), 0
    for level, names in enumerate(LAYERS[where]):
        if inner in names:
            return FOLDERS.index(where), level
    raise AssertionError(f"{module} is on no layer of {where}/: add it to LAYERS")


def _imports(module: str) -> set[str]:
    prefix = fingerprint.PACKAGE + "."
    return {m.removeprefix(prefix) for m in fingerprint.imported(prefix + module)}


@pytest.mark.parametrize("module", _modules())
def test_no_module_imports_a_higher_layer(module):
    above = sorted(m for m in _imports(module) if layer(m) > layer(module))
    assert not above, f"{module} {layer(module)} imports {above} from a higher layer"


@pytest.mark.parametrize("module", [m for m in _modules() if folder(m) == "core"])
def test_the_core_never_imports_reproduction(module):
    assert not {m for m in _imports(module) if folder(m) == "reproduction"}, module


def test_the_package_root_holds_only_the_core_and_the_public_face():
    root = {p.stem for p in fingerprint.ROOT.glob("*.py")} - {"__init__"}
    assert root == {"protocol", "validation", "registry", "metrics", "linalg", "losses", "models", "settings", "driver",
                    "cli"}


def test_engines_and_algorithms_do_not_import_each_other():
    for module in _modules():
        other = {"engine": "algorithms", "algorithms": "engine"}.get(module.split(".")[0])
        if other:
            assert not {m for m in _imports(module) if m.split(".")[0] == other}, module


def test_the_algorithms_never_import_the_tasks():
    """An algorithm reaches a task only through the task object it is handed (the ADMM family:
    ``task.client_blocks()``), so the algorithms stand on the protocol alone."""
    for module in _modules():
        if module.split(".")[0] == "algorithms":
            assert not {m for m in _imports(module) if m.split(".")[0] == "tasks"}, module


def test_the_layer_reader_sees_an_upward_import():
    # the run's settings import the algorithms' base: were the settings below them, the test above would fail
    assert "algorithms.base" in _imports("settings") and layer("algorithms.base") < layer("settings")
    assert "driver" in _imports("experiments.runner")
    # across folders: the report reads the claims (reproduction), the cache writes through infra
    assert layer("infra.atomic") < layer("experiments.cache") < layer("reproduction.report")
    assert "infra.atomic" in _imports("experiments.cache")


@pytest.mark.parametrize("module", _modules())
def test_no_module_over_400_lines(module):
    path = fingerprint.module_file(f"{fingerprint.PACKAGE}.{module}")
    lines = len(path.read_text().splitlines())
    assert lines <= 400, f"{path.relative_to(fingerprint.ROOT)} has {lines} lines"


def every_import(module: str, source: str | None = None) -> set[str]:
    """The package's modules that ``module`` names in any import statement of its source (``source``, or its file's):
    at the top, inside a function (a lazy import) or under ``if TYPE_CHECKING`` alike."""
    path = fingerprint.module_file(f"{fingerprint.PACKAGE}.{module}")
    tree = ast.parse(source if source is not None else path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    known, out = set(_modules()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source_module = ".".join(p for p in (base, node.module) if p)
            for alias in node.names:
                candidate = f"{source_module}.{alias.name}".strip(".")
                out.add(candidate if candidate in known else source_module)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            prefix = fingerprint.PACKAGE + "."
            out |= {n.removeprefix(prefix) for n in names if n.startswith(prefix)}
    return {m for m in out if m in known and m != module}


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` (module -> the modules it imports), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return error.args[1]
    return None


def test_no_import_circle():
    assert circle({m: every_import(m) for m in _modules()}) is None


def test_the_circle_finder_sees_an_import_for_annotations_only():
    """The circle this package once had: ``tasks/core.py`` imports ``tasks/convex.py`` lazily, and ``convex.py``
    imported ``Task`` back under ``TYPE_CHECKING``; put back, it is found."""
    graph = {m: every_import(m) for m in _modules()}
    assert "tasks.convex" in graph["tasks.core"]  # the lazy import, inside a method
    source = fingerprint.module_file(f"{fingerprint.PACKAGE}.tasks.convex").read_text()
    graph["tasks.convex"] = every_import("tasks.convex", source + "\nif TYPE_CHECKING:\n    from .core import Task\n")
    assert set(circle(graph)) == {"tasks.convex", "tasks.core"}
