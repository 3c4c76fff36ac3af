"""The cache key names what a run depends on: the code it executes (normalised source) and a user's own data."""
import shutil

import numpy as np
import pytest
import torch

import fedcompanion as fc
from fedcompanion.data.loaders import LOADERS, ArrayDataset
from fedcompanion.data.partition import PARTITIONS
from fedcompanion.experiments import TASKS, ExperimentConfig, build_task, sweep
from fedcompanion.infra import fingerprint as fp

CONFIGS = {
    "fedavg": ExperimentConfig(algorithm="fedavg"),
    "fedvra": ExperimentConfig(algorithm="fedvra"),
    "fedadam": ExperimentConfig(algorithm="fedadam"),
    "iceadmm": ExperimentConfig(task="least_squares", algorithm="iceadmm"),
    "clustering": ExperimentConfig(task="clustering", algorithm="two_block", hyperparameters={"inner": "fedavg"}),
}


def test_normalised_source_ignores_comments_docstrings_and_layout_only():
    a = 'def f(x):\n    """Doc."""\n    return x + 1  # one\n'
    b = "def f(x):\n\n    return (x +\n            1)\n"
    assert fp.normalised_source(a) == fp.normalised_source(b)
    assert fp.normalised_source(a) != fp.normalised_source("def f(x):\n    return x + 2\n")
    assert fp.normalised_source('class A:\n    "Doc."\n') == fp.normalised_source("class A:\n    pass\n")


def _hashes():
    fp.clear()
    return {name: c.hash() for name, c in CONFIGS.items()}


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A copy of the package's source that the fingerprint reads instead of the real one."""
    root = tmp_path / "fedcompanion"
    shutil.copytree(fp.ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    before = _hashes()
    monkeypatch.setattr(fp, "ROOT", root)
    yield root, before
    monkeypatch.undo()
    fp.clear()


def _edit(path, old, new):
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_docstrings_comments_and_a_new_algorithm_leave_every_key_valid(scratch):
    root, before = scratch
    _edit(root / "algorithms/fedavg.py", "FedAvg (McMahan et al., 2017)", "FedAvg (McMahan and others, 2017)")
    _edit(root / "driver.py", "\nimport math\n", "\nimport math  # a comment\n")
    (root / "algorithms/fedtoy.py").write_text(
        "from .fedavg import FedAvg\nfrom .base import register\n\n\n@register\nclass FedToy(FedAvg):\n"
        "    name = 'fedtoy'\n")
    _edit(root / "algorithms/__init__.py", '"""Federated', '"""Edited. Federated')
    assert _hashes() == before


def test_an_unused_constant_changes_no_key_and_fedvras_default_changes_fedvras_runs_only(scratch):
    root, before = scratch
    _edit(root / "algorithms/fedvra.py", "@register", "SOMETHING = 1\n\n\n@register")
    assert _hashes() == before  # nothing uses it
    _edit(root / "algorithms/fedvra.py", "def __init__(self, gamma: float | list = 0.1,",
          "def __init__(self, gamma: float | list = 0.2,")
    after = _hashes()
    assert after["fedvra"] != before["fedvra"]
    assert {k: v for k, v in after.items() if k != "fedvra"} == {k: v for k, v in before.items() if k != "fedvra"}


def test_two_blocks_default_inner_algorithm_is_in_its_key(scratch):
    """two_block's inner algorithm defaults to FedVRA: an edit of FedVRA must change the key of a two_block run
    that names no inner algorithm (it used to be served the old run)."""
    root, _ = scratch
    config = ExperimentConfig(task="clustering", algorithm="two_block")
    before = config.hash()
    _edit(root / "algorithms/fedvra.py", "def __init__(self, gamma: float | list = 0.1,",
          "def __init__(self, gamma: float | list = 0.2,")
    fp.clear()
    assert config.hash() != before


def test_changing_a_helper_in_fedavg_invalidates_the_runs_that_import_it(scratch):
    root, before = scratch
    _edit(root / "algorithms/fedavg.py", "def weighted_mean_of_updates(info, updates, aggregation: str):",
          "def weighted_mean_of_updates(info, updates, aggregation: str = 'normalized'):")
    after = _hashes()
    changed = {k for k in before if after[k] != before[k]}
    assert changed == {"fedavg", "fedadam", "clustering"}  # fedopt imports fedavg; two_block's inner is fedavg


def _toy(shift=0.0):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 5, generator=g)
    y = torch.bucketize(x[:, 0] + shift, torch.tensor([-0.4, 0.4]))
    return ArrayDataset(x, y, 3), ArrayDataset(x[:30], y[:30], 3)


@pytest.fixture
def toy_dataset():
    yield "toy-user"
    LOADERS.pop("toy-user", None)
    LOADERS.user.discard("toy-user")


def test_a_user_dataset_runs_in_parallel_workers_and_changed_arrays_are_recomputed(tmp_path, toy_dataset):
    train, test = _toy()
    fc.register_dataset(toy_dataset, lambda: (train, test))  # a lambda: as in a notebook, it cannot be pickled
    configs = [ExperimentConfig(task="dataset", task_args={"dataset": toy_dataset, "num_clients": 4,
                                                           "model": "logistic"},
                                rounds=2, clients_per_round=2, seed=s, per_client_metrics=False) for s in (0, 1)]
    first = sweep(configs, tmp_path, jobs=2, progress=False)
    assert list(first.attrs["runs"].status) == ["ok", "ok"]
    serial = sweep(configs, tmp_path / "serial", jobs=1, progress=False)
    pd_equal = first.value.to_numpy() == serial.value.to_numpy()
    assert pd_equal.all()  # the workers ran on the same arrays as this process
    old = configs[0].hash()
    fc.register_dataset(toy_dataset, lambda: _toy(shift=0.5))  # same name, other labels
    assert configs[0].hash() != old
    second = sweep(configs, tmp_path, jobs=1, progress=False)
    assert not np.array_equal(first.value.to_numpy(), second.value.to_numpy())
    fc.register_dataset(toy_dataset, train=train, test=test)  # the first arrays again, given directly
    assert configs[0].hash() == old


def test_a_task_registered_again_under_its_name_is_recomputed(tmp_path):
    a = fc.tasks.least_squares_task(num_clients=3, dim=4, seed=0)
    b = fc.tasks.least_squares_task(num_clients=3, dim=4, seed=1)
    try:
        fc.register_task("mine", lambda seed: a)
        config = ExperimentConfig(task="mine", algorithm="fedavg", rounds=2, clients_per_round=None,
                                  per_client_metrics=False)
        first = sweep([config], tmp_path, jobs=1, progress=False)
        fc.register_task("mine", lambda seed: b)
        second = sweep([config], tmp_path, jobs=1, progress=False)
        assert not np.array_equal(first.value.to_numpy(), second.value.to_numpy())
        assert build_task(config) is b
    finally:
        TASKS.pop("mine")
        TASKS.user.discard("mine")


def test_a_notebook_task_cannot_go_to_workers_and_says_so(tmp_path):
    task = fc.tasks.least_squares_task(num_clients=3, dim=4, seed=0)
    try:
        fc.register_task("mine2", lambda seed: task)
        configs = [ExperimentConfig(task="mine2", rounds=1, clients_per_round=None, seed=s) for s in (0, 1)]
        with pytest.raises(fc.ConfigError, match="task 'mine2' cannot be sent to worker processes"):
            sweep(configs, tmp_path, jobs=2, progress=False)
    finally:
        TASKS.pop("mine2")
        TASKS.user.discard("mine2")


def every_second(labels, num_clients, rng, *, offset=0):
    """A user's partitioner: client k holds the samples with index = k (mod num_clients), after ``offset``."""
    index = (np.arange(len(labels)) + offset) % num_clients
    return [np.flatnonzero(index == k).astype(np.int64) for k in range(num_clients)]


def test_every_partitioner_parameter_is_reachable_and_a_user_partitioner_is_keyed_by_its_code():
    config = ExperimentConfig(task_args={"num_clients": 30, "partition_scheme": "quantity", "beta": 0.3,
                                         "min_size": 40})
    config.validate()
    assert int(build_task(config).client_sizes.min()) >= 40
    with pytest.raises(fc.ConfigError, match="no argument \\['shards_per_client'\\]"):
        ExperimentConfig(task_args={"partition_scheme": "quantity", "shards_per_client": 2}).validate()
    try:
        fc.register_partition("every_second", every_second)
        config = ExperimentConfig(task_args={"num_clients": 10, "partition_scheme": "every_second", "offset": 3})
        config.validate()
        assert any(getattr(r, "__name__", "") == "every_second" for r in config.code_roots())
        assert config.hash() != ExperimentConfig(task_args={"num_clients": 10, "partition_scheme": "every_second",
                                                            "offset": 4}).hash()
    finally:
        PARTITIONS.pop("every_second")
        PARTITIONS.user.discard("every_second")


def test_one_task_is_built_once_for_every_algorithm_run_on_it():
    base = dict(task="least_squares", task_args=dict(num_clients=4, dim=3), seed=3)
    a, b = ExperimentConfig(algorithm="fedavg", **base), ExperimentConfig(algorithm="fedvra", **base)
    assert a.hash() != b.hash() and build_task(a) is build_task(b)
    assert build_task(ExperimentConfig(algorithm="fedavg", **{**base, "seed": 4})) is not build_task(a)


def test_two_notebook_lambdas_of_one_run_both_count():
    """A notebook's task builder and metric may both be lambdas (the same qualified name): each must count."""
    space = {"__name__": "__main__"}
    exec("f1 = lambda seed: 1\nf2 = lambda seed: 2\ng = lambda task, config: 0", space)  # no source kept
    assert fp.fingerprint([space["f1"], space["g"]]) != fp.fingerprint([space["f2"], space["g"]])
    assert fp.fingerprint([space["f1"], space["g"]]) == fp.fingerprint([space["g"], space["f1"]])


def test_the_named_metrics_do_not_reach_the_two_block_algorithm():
    """A run that records suboptimality or clustering_objective keeps its key when two_block changes: the metrics
    use the simplex step (algorithms.simplex), not the algorithm; two_block itself uses it."""
    from fedcompanion.experiments.named_metrics import clustering_objective

    metrics = {m for m, _ in fp.reached([clustering_objective])}
    assert "fedcompanion.algorithms.simplex" in metrics and "fedcompanion.algorithms.two_block" not in metrics
    from fedcompanion.algorithms.two_block import TwoBlock

    assert "fedcompanion.algorithms.simplex" in {m for m, _ in fp.reached([TwoBlock])}


def test_a_users_partitioned_task_is_checked_and_keyed_like_the_built_in_ones():
    """A builder that takes ``partition_scheme`` is partitioned (no hand-kept list of names): the partitioner's own
    keywords are accepted and its code is a root of the key; a builder without it takes no partition keyword."""
    def mine(seed=0, partition_scheme="iid", num_clients=4, **partition_kwargs):
        return fc.tasks.federated_dataset_task("mnist", num_clients, partition_scheme, seed=seed, **partition_kwargs)

    fc.register_task("mine-partitioned", mine)
    try:
        config = ExperimentConfig(task="mine-partitioned", task_args={"partition_scheme": "dirichlet", "alpha": 0.3})
        assert config.validate()._partition_scheme() == "dirichlet"
        assert PARTITIONS["dirichlet"] in config.task_roots()
        with pytest.raises(fc.ConfigError, match="has no argument"):
            ExperimentConfig(task="least_squares", task_args={"alpha": 0.3}).validate()
    finally:
        TASKS.pop("mine-partitioned")
