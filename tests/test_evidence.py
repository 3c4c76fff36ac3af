"""Every claim is built in the package (:mod:`fedcompanion.reproduction.claims`), once, and the notebooks only call it:
no code cell builds an item, a control or a claim. Then the builders themselves, on hand-made tables whose words are
known, each test failing if a builder swapped the claim and its control or read the wrong column."""
from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from fedcompanion.reproduction.claims.record import load_summaries

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
BUILDERS = sorted(p for p in (ROOT / "src" / "fedcompanion" / "reproduction" / "claims").glob("*.py")
                  if p.stem not in ("record", "from_runs"))  # the builders: one module per paper
# what builds evidence: an item, a control, a claim (the rule's words and the display of items stay in notebooks)
BUILDING = {"Claim", "per_seed_evidence", "paired", "against", "identity", "untestable", "stopped_early",
            "early_values", "untrained_control"}


def called(source: str) -> set[str]:
    """The names of the functions ``source`` calls (``f(...)`` and ``module.f(...)``)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_no_notebook_builds_evidence(path):
    built = {name for cell in code_cells(path) for name in called(cell) & BUILDING}
    assert not built, f"{path.name} builds evidence itself ({sorted(built)}): call fedcompanion.reproduction.claims"


def test_the_reader_finds_a_notebook_that_builds_evidence():
    # the notebook cell of the tree before fedcompanion.reproduction.claims: it must be caught
    cell = 'record("x", "t", [Claim("a.b", "FedVRA", "c", [], [identity("s", "q", 0.0, 1e-10)])], RESULTS, "paper")'
    assert called(cell) & BUILDING == {"Claim", "identity"}
    assert not called("claims = evidence.fedvra.rate_claims(P)\nshow(claims)") & BUILDING


def built_claims() -> list[str]:
    """The id of every claim the package builds: the literal first argument of each ``Claim(...)`` in the builders."""
    ids = []
    for path in BUILDERS:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Claim":
                assert isinstance(node.args[0], ast.Constant), f"{path.name}: a claim's id must be a literal"
                ids.append(node.args[0].value)
    return ids


def test_every_recorded_claim_is_built_once_in_the_package():
    ids = built_claims()
    recorded = {c.id for s in load_summaries(ROOT / "results") for c in s.claims}
    assert recorded, "no summary read"
    twice = sorted({i for i in ids if ids.count(i) > 1})
    assert not twice, f"built more than once: {twice}"
    assert recorded == set(ids), (f"recorded, not built: {sorted(recorded - set(ids))}; built, not recorded: "
                                  f"{sorted(set(ids) - recorded)}")


# The builders on hand-made numbers


def test_the_rate_claim_judges_fedvra_and_rejects_its_control():
    from fedcompanion.reproduction.claims.fedvra import rate_claims

    seeds = range(8)
    cases = [("FedVRA", "S = sqrt(R)"), ("FedVRA", "fixed S"), ("FedAvg", "S = sqrt(R)")]
    slopes = pd.DataFrame({"FedVRA, S = sqrt(R)": [-0.9] * 8, "FedVRA, fixed S": [-0.1 + 0.01 * s for s in seeds],
                           "FedAvg, S = sqrt(R)": [-0.8] * 8, "FedVRA, S = sqrt(R), uneven work": [-0.7] * 8},
                          index=pd.Index(seeds, name="seed"))
    P = SimpleNamespace(num_clients=8, clients_per_round=2, local_steps=5, lr=0.1, horizons=[16, 64], seeds=list(seeds))
    rate, table1 = rate_claims(P, slopes=slopes, path_slopes=slopes, cases=cases, variants=["uneven work"])
    assert [e.word() for e in rate.evidence] == ["reproduces", "reproduces"]
    assert rate.controls[0].word() != "reproduces" and rate.verdict == "holds (our reconstruction)"
    assert table1.verdict == "not testable here"
    # the claim and its control swapped: the claim fails, so a builder that read the wrong column cannot pass
    claimed, control = "FedVRA, S = sqrt(R)", "FedVRA, fixed S"
    swapped = slopes.rename(columns={claimed: control, control: claimed})
    assert rate_claims(P, slopes=swapped, path_slopes=swapped, cases=cases,
                       variants=["uneven work"])[0].evidence[0].word() != "reproduces"


def test_the_semi_supervised_claims_pair_each_method_with_its_own_baseline():
    from fedcompanion.reproduction.claims.fedvra_comparisons import SEMI_SUPERVISED_PAIRS, semi_supervised_claims

    seeds = list(range(8))
    accuracy = {"FedVRA-U": 0.9, "FedAvg-U": 0.8, "FedVRA, labelled rows only": 0.95, "FedAvg, labelled rows only": 0.7}
    table = pd.DataFrame([{"method": m, "seed": s, "test_accuracy": a + 0.001 * s} for m, a in accuracy.items()
                          for s in seeds]).set_index(["method", "seed"])
    frame = pd.DataFrame([{"method": m, "seed": s, "round": r, "client": -1, "metric": "test_accuracy",
                           "value": a * r / 10, "status": "ok", "hash": f"{m}{s}"}
                          for m, a in accuracy.items() for s in seeds for r in (0, 5, 10)])
    tuned = {m: SimpleNamespace(setting={"lr": 0.1}, grid={"lr": [0.05, 0.1, 0.2]}) for m in accuracy}
    P = SimpleNamespace(labelled_fraction=0.1, dirichlet_alpha=0.1, num_clients=20, clients_per_round=5,
                        local_steps=5, batch_size=32, rounds=10, tau=1.0, mass=1.0, start_round=0, gamma=0.1,
                        tune_seeds=[100], lr_grid=[0.1], seeds=seeds)
    semi, pseudo = semi_supervised_claims(P, table=table, frame=frame, tuned=tuned, methods=list(accuracy), share=0.3)
    assert [(e.question, e.word()) for e in semi.evidence] == [("FedVRA-U vs FedAvg-U", "reproduces")]
    # FedVRA-U below FedVRA on the labelled rows alone: that item is reversed, FedAvg-U's holds
    assert [e.word() for e in pseudo.evidence] == ["does not reproduce", "reproduces"]
    assert [p for p in SEMI_SUPERVISED_PAIRS] == [tuple(e.question.split(" vs ")) for e in semi.evidence
                                                                                   + pseudo.evidence]
