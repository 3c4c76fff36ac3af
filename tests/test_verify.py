"""make verify's verdicts: bit-identity on the platform that computed a run, tolerances across platforms."""
import pandas as pd

from fedcompanion.experiments import ExperimentConfig, load_result, sweep
from fedcompanion.infra.machine import numerical_platform
from fedcompanion.reproduction.verify import compare, judge, platform_difference


def history(values, rounds=(0, 0, 1, 1), metrics=("loss", "grad_sq", "loss", "grad_sq")):
    return pd.DataFrame({"round": list(rounds), "client": -1, "metric": list(metrics), "value": list(values)})


def test_differences_are_relative_to_each_metrics_scale():
    old = history([2.0, 1.0, 1.0, 1e-20])
    new = history([2.0, 1.0, 1.0, 2e-20])  # doubled, but 1e-20 of the metric's scale (1.0)
    assert compare(old, new) == 1e-20
    assert compare(old, history([2.0, 1.0, 1.5, 1e-20])) == 0.25  # 0.5 of the loss's scale 2.0
    assert compare(old, history([2.0, 1.0, float("nan"), 1e-20])) == float("inf")
    assert compare(old, history([2.0, 1.0, 1.0], rounds=(0, 0, 1), metrics=("loss", "grad_sq", "loss"))) == \
        float("inf")


def test_the_platform_that_computed_a_run_must_give_its_bits():
    old = history([2.0, 1.0, 1.0, 0.5])
    assert judge(old, old.copy(), "float64", same_platform=True) == (True, "bit-identical")
    ok, verdict = judge(old, history([2.0, 1.0, 1.0, 0.5 + 1e-15]), "float64", same_platform=True)
    assert not ok and "DIFFERENT" in verdict


def test_another_platform_float64_within_tolerance_of_the_scale():
    old = history([2.0, 1.0, 1.0, 0.5])
    assert judge(old, history([2.0, 1.0, 1.0, 0.5 + 1e-12]), "float64", same_platform=False)[0]
    assert not judge(old, history([2.0, 1.0, 1.0, 0.5 + 1e-6]), "float64", same_platform=False)[0]


def test_another_platform_float32_checks_the_untrained_model_only():
    old = history([2.0, 1.0, 1.0, 0.5])
    ok, verdict = judge(old, history([2.0, 1.0, 1.2, 0.4]), "float32", same_platform=False)
    assert ok and "after training up to 1.0e-01" in verdict
    ok, verdict = judge(old, history([2.1, 1.0, 1.0, 0.5]), "float32", same_platform=False)
    assert not ok and "untrained" in verdict


def test_platform_difference_names_the_fields_that_differ():
    here = numerical_platform()
    assert platform_difference(dict(here)) == ""
    assert platform_difference(None) == "not recorded"
    there = "AVX2" if here["cpu_capability"] != "AVX2" else "AVX512"  # unlike this machine's, whichever it is
    other = {**here, "cpu_capability": there}
    assert platform_difference(other) == f"cpu_capability: {there!r} there, {here['cpu_capability']!r} here"


def test_stored_runs_record_their_platform(tmp_path):
    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=3),
                              algorithm="fedavg", rounds=2, clients_per_round=2, lr=0.1, seed=0)
    sweep([config], tmp_path, jobs=1, progress=False)
    _, meta = load_result(config, tmp_path)
    assert meta["platform"] == numerical_platform()
    assert set(meta["platform"]) == {"cpu", "isa", "cpu_capability", "torch", "blas", "system"}


def test_compare_folders_matches_runs_by_config_whatever_code_made_them(tmp_path, monkeypatch):
    import dataclasses

    import fedcompanion.experiments.config as experiments
    from fedcompanion.experiments import run_config, store
    from fedcompanion.reproduction.verify import compare_folders

    base = dict(task="least_squares", task_args=dict(num_clients=4, dim=3), algorithm="fedavg", rounds=2,
                clients_per_round=2, seed=0)
    same, changed, alone = (ExperimentConfig(**base, lr=lr) for lr in (0.1, 0.2, 0.3))
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    sweep([same, changed, alone], ours, jobs=1, progress=False)
    monkeypatch.setattr(experiments, "fingerprint", lambda roots: "other-code")  # their runs: made by other code
    store(same, run_config(same), theirs)
    result = run_config(changed)
    history = result.history.copy()
    history.loc[(history.metric == "train_loss") & (history["round"] > 0), "value"] *= 1 + 1e-3  # after training
    store(changed, dataclasses.replace(result, history=history), theirs)
    table = compare_folders(ours, theirs)
    assert sorted(table.outcome) == ["bit-identical", "different", "only here"]
    different = table[table.outcome == "different"].iloc[0]
    assert 1e-4 < different.difference < 1e-2 and different.untrained == 0  # the untrained model is the same
    (theirs / f"{same.hash()}.csv.gz").write_bytes(b"edited")  # a history its JSON does not vouch for is not read
    assert sorted(compare_folders(ours, theirs).outcome) == ["different", "only here", "only here"]


def test_every_smoke_rule_finds_a_committed_run_made_by_this_code():
    """make verify needs one committed run per rule of its smoke subset; a notebook whose grid moves must move the
    rule with it (caught here, in seconds, rather than at the end of make test)."""
    from pathlib import Path

    from fedcompanion.reproduction.verify import SUBSETS, _stored, select

    chosen = select("smoke", _stored(Path(__file__).resolve().parents[1] / "results"))
    assert len(chosen) == len(SUBSETS["smoke"]), [m.get("label") for m in chosen]


def test_the_dtype_compared_is_the_builders_own_not_a_list_of_names():
    """Issue 47 (weak case): verify guessed float64 from two task names; a user's float64 builder was compared at
    float32's tolerance."""
    import torch

    import fedcompanion as fc
    from fedcompanion.reproduction.verify import _dtype
    from fedcompanion.tasks import TASKS

    def mine(seed=0, dtype=torch.float64):
        return fc.tasks.least_squares_task(num_clients=3, dim=2, seed=seed, dtype=dtype)

    try:
        fc.register_task("mine-float64", mine)
        assert _dtype("mine-float64") == "float64"
        assert _dtype("least_squares") == _dtype("qsar") == "float64" and _dtype("dataset") == "float32"
    finally:
        TASKS.pop("mine-float64")
        TASKS.user.discard("mine-float64")


def test_the_methods_subset_recomputes_one_run_of_each_method_and_fails_on_one_that_does_not_come_back(tmp_path):
    """`make test`'s determinism check of the runs (``verify --subset methods --results build/test-results``): the
    shortest run of every method is recomputed and must be bit-identical. Wrong: a check that reads the stored run
    back (it would vouch for a history another config computed, as below)."""
    import dataclasses
    import subprocess
    import sys

    from fedcompanion.experiments import run_config, store
    from fedcompanion.reproduction.verify import _stored, select

    def main(args):  # the command as make test runs it, in a process of its own
        return subprocess.run([sys.executable, "-m", "fedcompanion.reproduction.verify", *args],
                              capture_output=True, text=True, timeout=300).returncode

    base = dict(task="least_squares", task_args=dict(num_clients=4, dim=3), clients_per_round=2, seed=0)
    short, long_, prox = (ExperimentConfig(**base, algorithm="fedavg", rounds=2, lr=0.1),
                          ExperimentConfig(**base, algorithm="fedavg", rounds=40, lr=0.1),
                          ExperimentConfig(**base, algorithm="fedprox", rounds=2, lr=0.1))
    sweep([short, long_, prox], tmp_path, jobs=1, progress=False)
    chosen = select("methods", _stored(tmp_path))
    assert sorted(m["config"]["algorithm"] for m in chosen) == ["fedavg", "fedprox"]
    picked = next(c for c in (short, long_) if any(m["_file"] == f"{c.hash()}.json" for m in chosen))
    assert main(["--subset", "methods", "--results", str(tmp_path)]) == 0
    other = run_config(dataclasses.replace(picked, lr=0.2))  # stored, and vouched for, as the chosen run's history
    store(picked, dataclasses.replace(other, history=other.history), tmp_path)
    assert main(["--subset", "methods", "--results", str(tmp_path)]) == 1
