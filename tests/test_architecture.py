"""The package's layers, read from its own imports (the same reader as the cache's fingerprint).

The folders draw the architecture: ``infra/`` (files, processes, the machine, logs, the code's fingerprint) at the
bottom, the federated-learning core at the package root (the protocol, losses, models, the engines, the algorithms,
the driver, tasks, data, experiments, Flower), and ``reproduction/`` on top (the papers' declarations, the verdict
rule, the claims and their evidence, figures, the report, the site, reproduce, verify). A folder never imports one
above it: infra imports nothing of the package's, the core never imports ``reproduction/``; only the public face
(the package's ``__init__`` and its command line) may reach every folder. Within each folder, a module imports only
modules of its own layer or a lower one; the engines and the algorithms never import each other (both meet in the
protocol, and the driver stands above them); no module is longer than 400 lines."""
from __future__ import annotations

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
