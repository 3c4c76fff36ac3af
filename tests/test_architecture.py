"""The package's layers, read from its own imports (the same reader as the cache's fingerprint).

A module imports only modules of its own layer or a lower one; the engines and the algorithms never import each other
(both meet in the protocol, and the driver stands above them); no module is longer than 400 lines."""
from __future__ import annotations

import pytest

from fedcompanion import fingerprint

LAYERS = [  # lowest first; a name covers a module or a subpackage and everything in it
    ["protocol", "validation", "definitions", "fingerprint", "memory", "metrics", "machine", "atomic", "verdict",
     "decision", "registry", "logs", "processes", "papers", "tolerance"],
    ["data", "losses", "models", "engine"],
    ["tasks", "plots"],
    ["algorithms", "forest"],
    ["driver"],
    ["experiments"],
    ["arena", "verify", "notebook", "flower", "timings", "claims"],
    ["report", "rekey", "prune", "evidence"],
    ["reproduce", "cli", "site"],
]


def _modules() -> list[str]:
    out = []
    for path in sorted(fingerprint.ROOT.rglob("*.py")):
        parts = list(path.relative_to(fingerprint.ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:  # the package's own __init__ only hands names on
            out.append(".".join(parts))
    return out


def layer(module: str) -> int:
    """The layer of ``module`` (a name relative to the package)."""
    head = module.split(".")[0]
    for level, names in enumerate(LAYERS):
        if head in names:
            return level
    raise AssertionError(f"{module} is on no layer: add it to LAYERS")


def _imports(module: str) -> set[str]:
    prefix = fingerprint.PACKAGE + "."
    return {m.removeprefix(prefix) for m in fingerprint.imported(prefix + module)}


@pytest.mark.parametrize("module", _modules())
def test_no_module_imports_a_higher_layer(module):
    above = sorted(m for m in _imports(module) if layer(m) > layer(module))
    assert not above, f"{module} (layer {layer(module)}) imports {above} from a higher layer"


def test_engines_and_algorithms_do_not_import_each_other():
    for module in _modules():
        other = {"engine": "algorithms", "algorithms": "engine"}.get(module.split(".")[0])
        if other:
            assert not {m for m in _imports(module) if m.split(".")[0] == other}, module


def test_the_layer_reader_sees_an_upward_import():
    # the driver imports the algorithms' base: were the driver below them, the test above would fail
    assert "algorithms.base" in _imports("driver") and layer("algorithms.base") < layer("driver")
    assert "driver" in _imports("experiments.runner")


@pytest.mark.parametrize("module", _modules())
def test_no_module_over_400_lines(module):
    path = fingerprint.module_file(f"{fingerprint.PACKAGE}.{module}")
    lines = len(path.read_text().splitlines())
    assert lines <= 400, f"{path.relative_to(fingerprint.ROOT)} has {lines} lines"
