"""Cached computations (fedcompanion.experiments.computed): computed once, read back with the same bits and types,
computed again when an argument, a parameter it reads or its code changes, refused when damaged, pruned when no
notebook reads them."""
import json
import types

import numpy as np
import pandas as pd
import pytest

import fedcompanion as fc
from fedcompanion.experiments.cache import take_read_runs
from fedcompanion.experiments.computed import FOLDER, _reads, computation_key, computed
from fedcompanion.infra.fingerprint import reached
from fedcompanion.reproduction.claims.record import Claim, record
from fedcompanion.reproduction.prune import delete, orphans
from fedcompanion.reproduction.rule.item import identity

P = types.SimpleNamespace(scale=0.1, unused=5)


class _Calls:
    """The seeds computed (an object the key does not read: a plain list global is data, and keyed)."""

    def __init__(self):
        self.seeds = []

    def append(self, seed):
        self.seeds.append(seed)

    def clear(self):
        self.seeds.clear()

    def __eq__(self, other):
        return self.seeds == other


CALLS = _Calls()


def trace(seed, n=3):
    CALLS.append(seed)
    rng = np.random.default_rng(seed)
    return {"frame": pd.DataFrame({"x": rng.standard_normal(n) * P.scale, "k": np.arange(n)}),
            "array": rng.standard_normal(2), "third": 1 / 3}


def uses_the_package_through_attributes(seed):
    return fc.tasks.federated_dataset_task("mnist", 2, "iid", "logistic", seed=seed)


def test_computed_once_then_read_back_with_the_same_bits_and_types(tmp_path):
    CALLS.clear()
    first = computed(trace, tmp_path, seed=3)
    second = computed(trace, tmp_path, seed=3)
    assert CALLS == [3]  # the second call read the record
    for value in (first, second):
        assert isinstance(value["frame"], pd.DataFrame) and list(value["frame"].columns) == ["x", "k"]
        assert isinstance(value["array"], list)  # an array comes back as a list, the first time too
    pd.testing.assert_frame_equal(first["frame"], second["frame"])
    assert first["array"] == second["array"] and second["third"] == 1 / 3  # float repr round-trips exactly
    assert (first["frame"].x.to_numpy() == np.random.default_rng(3).standard_normal(3) * 0.1).all()
    assert len(list((tmp_path / FOLDER).glob("*.json"))) == 1


def test_a_changed_argument_parameter_or_code_is_computed_again(tmp_path, monkeypatch):
    CALLS.clear()
    computed(trace, tmp_path, seed=3)
    computed(trace, tmp_path, seed=3, n=4)  # an argument
    monkeypatch.setattr(P, "scale", 0.2)  # a parameter the code reads
    computed(trace, tmp_path, seed=3)
    monkeypatch.setattr(P, "unused", 6)  # one it does not read: no new computation
    computed(trace, tmp_path, seed=3)
    assert CALLS == [3, 3, 3]
    assert computation_key(trace, {"seed": 3})["parameters"] == {"P": {"scale": 0.2}}
    namespace = {}
    exec("def f(x):\n    return x + 1\n", namespace)  # code without a file: its bytecode counts
    other = {}
    exec("def f(x):\n    return x + 2\n", other)
    assert computed(namespace["f"], tmp_path, x=1) == 2 and computed(other["f"], tmp_path, x=1) == 3


def test_package_code_reached_through_a_module_attribute_is_in_the_key():
    roots, _ = _reads(uses_the_package_through_attributes)
    assert fc.tasks.federated_dataset_task in roots
    assert any(module.startswith("fedcompanion.tasks") for module, _ in reached(roots))


def test_a_damaged_record_warns_and_is_computed_again(tmp_path):
    CALLS.clear()
    computed(trace, tmp_path, seed=1)
    path = next((tmp_path / FOLDER).glob("*.json"))
    record_ = json.loads(path.read_text())
    record_["value"]["third"] = 0.5  # an edited value
    path.write_text(json.dumps(record_))
    with pytest.warns(UserWarning, match="does not match its digest"):
        value = computed(trace, tmp_path, seed=1)
    assert value["third"] == 1 / 3 and CALLS == [1, 1]
    path.write_text("{not json")
    with pytest.warns(UserWarning, match="not a valid record"):
        computed(trace, tmp_path, seed=1)


def test_values_that_are_not_data_are_refused(tmp_path):
    with pytest.raises(TypeError, match="cannot be stored"):
        computed(lambda: object(), tmp_path)


def test_a_computation_no_notebook_reads_is_pruned(tmp_path):
    take_read_runs()
    computed(trace, tmp_path, seed=1)
    computed(trace, tmp_path, seed=2)
    claim = Claim("x.y", "FedVRA", "a claim", [], [identity("s", "q", 0.0, 1e-12)])
    record("nb", "old", [claim], tmp_path, "paper")
    computed(trace, tmp_path, seed=1)  # the notebook now reads only the first
    summary = record("nb", "a notebook", [claim], tmp_path, "paper").summary
    read = computation_key(trace, {"seed": 1})
    from fedcompanion.experiments.config import key_hash

    assert summary.runs_read == [key_hash(read)]
    unread = key_hash(computation_key(trace, {"seed": 2}))
    assert orphans(tmp_path, min_age_hours=0) == [unread]
    assert delete(tmp_path, [unread]) == 1
    assert orphans(tmp_path, 0) == [] and (tmp_path / FOLDER / f"{key_hash(read)}.json").exists()


def test_a_summary_equal_but_for_last_digits_is_left_as_stored(tmp_path):
    """Re-executing on another CPU: a residual 5.6e-17 becomes 1.1e-16 (in a value and printed in a text); the stored
    summary stays byte for byte. A printed number that moves in its last digit, or a changed setting, is written, and
    reproduce's report names where."""
    from fedcompanion.reproduction.reproduce import moved_summaries

    def claim(residual, printed, value):
        return Claim("x.y", "FedVRA", "a claim", [], [identity("s", "q", residual, 1e-10)],
                     numbers=f"weight {printed}, deviation {residual:.1e}", settings=f"lr {value}")

    take_read_runs()
    path = record("nb", "a notebook", [claim(5.6e-17, "0.08731", 0.1)], tmp_path, "paper").path
    stored = path.read_text()
    kept = record("nb", "a notebook", [claim(1.1e-16, "0.08731", 0.1)], tmp_path, "paper")
    assert path.read_text() == stored and list(kept.summary.claims[0].evidence[0].values) == [5.6e-17]
    record("nb", "a notebook", [claim(1.1e-16, "0.08732", 0.1)], tmp_path, "paper")  # its last digit: it moved
    assert path.read_text() != stored
    moved_text = path.read_text()
    record("nb", "a notebook", [claim(1.1e-16, "0.08732", 0.2)], tmp_path, "paper")  # a setting changed
    lines = moved_summaries({path: moved_text}, tmp_path)
    assert len(lines) == 1 and "claims[0].settings" in lines[0]


def test_an_attribute_named_like_a_global_does_not_put_that_globals_value_in_the_key():
    """Notebook code without a file counts by its source and the globals it reads. ``play_round(...).state`` reads
    the attribute ``state``, not a notebook's global ``state``: keying that global's repr made fedvra/01's key change
    from one kernel to the next (its repr held addresses), so the cache never hit on a fresh clone."""
    namespace = {"__name__": "a_notebook_cell", "state": fc.LocalWork(steps=1)}
    exec("def f(result):\n    return result.state\n", namespace)
    first = computation_key(namespace["f"], {})["code"]
    namespace["state"] = fc.LocalWork(steps=2)
    assert computation_key(namespace["f"], {})["code"] == first
    exec("def g():\n    return state.steps\n", namespace)  # a global it does read is keyed
    second = computation_key(namespace["g"], {})["code"]
    namespace["state"] = fc.LocalWork(steps=3)
    assert computation_key(namespace["g"], {})["code"] != second
