"""The key covers what a run uses and nothing else: every committed run re-hashed after a scratch edit of the
package, and the inputs a user's run depends on (their helpers, constants, engines, data) each able to change it.

Each test names the wrong key it rejects: the coarse module-closure key (every run invalid after an unused function)
fails the "nothing else" tests; a key without the entry, helper, constant or checksum fails the "covers" tests.
"""
import collections
import hashlib
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

import fedcompanion as fc
from fedcompanion.algorithms.base import REGISTRY
from fedcompanion.engine import ENGINES, probe_loop, train_loop
from fedcompanion.experiments import ExperimentConfig
from fedcompanion.infra import fingerprint as fp
from fedcompanion.reproduction.verify import _config, _stored

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _families(config: ExperimentConfig) -> str:
    return "admm" if REGISTRY.lookup(config.algorithm).solves_exactly else f"{config.task}/{config.engine}"


@pytest.fixture(scope="module")
def committed():
    """One committed config per distinct set of code roots (the rest share their fingerprint), with its count."""
    groups: dict = {}
    for meta in _stored(RESULTS):
        c = _config(meta)
        ident = (c.algorithm, json.dumps(c.hyperparameters, sort_keys=True, default=list), c.task, c._dataset(),
                 c._partition_scheme(), c.engine, c.sampling, tuple(c.metrics))
        groups.setdefault(ident, [c, 0])[1] += 1
    assert sum(n for _, n in groups.values()) > 1000  # the committed runs are there
    return list(groups.values())


def _still_valid(committed, root: Path, rel: str, old: str, new: str):
    """(valid, total) committed runs by family after the scratch edit ``old -> new`` of ``rel``."""
    before = {i: c.key()["code"] for i, (c, _) in enumerate(committed)}
    path = root / rel
    text = path.read_text()
    assert old in text, f"{old!r} not in {rel}"
    path.write_text(text.replace(old, new, 1))
    saved = fp.ROOT
    fp.ROOT = root
    fp.clear()
    try:
        valid, total = collections.Counter(), collections.Counter()
        for i, (c, n) in enumerate(committed):
            total[_families(c)] += n
            valid[_families(c)] += n * (c.key()["code"] == before[i])
        return valid, total
    finally:
        fp.ROOT = saved
        fp.clear()
        path.write_text(text)


@pytest.fixture
def scratch(tmp_path):
    root = tmp_path / "fedcompanion"
    shutil.copytree(fp.ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    fp.clear()
    yield root
    fp.clear()


def test_adding_a_function_to_the_partition_module_leaves_every_committed_run_valid(committed, scratch):
    valid, total = _still_valid(committed, scratch, "data/partition.py", "\ndef label_counts(",
                                "\ndef unused_helper(x):\n    return x + 1\n\n\ndef label_counts(")
    assert valid == total


@pytest.mark.parametrize("rel", ["driver.py", "settings.py", "infra/machine.py", "algorithms/fedvra.py",
                                 "engine/batched.py", "tasks/core.py", "data/loaders.py", "experiments/runner.py",
                                 "flower/core.py", "reproduction/rule/item.py"])
def test_an_unused_function_in_any_folder_leaves_every_committed_run_valid(committed, scratch, rel):
    """One module per folder. The runner was a root as a whole module: a helper added there invalidated every run
    (with ``code_roots`` naming the module again, the runner's case fails); the root is now ``run_config``."""
    text = (scratch / rel).read_text()
    valid, total = _still_valid(committed, scratch, rel, text, text + "\n\ndef unused_helper(x):\n    return x + 1\n")
    assert valid == total


@pytest.mark.parametrize("rel, old, new", [
    ("engine/__init__.py", 'DEFAULT_ENGINE = "batched"',
     'ENGINES.register("toy", (train_loop, probe_loop))\nDEFAULT_ENGINE = "batched"'),
    ("tasks/builders.py", "\ndef is_partitioned(",
     "def toy_task(seed=0):\n    return least_squares_task(seed=seed)\n\n\nTASKS.register('toy', toy_task)\n\n"
     "\ndef is_partitioned("),
    ("data/partition.py", "\ndef partition(",
     "@register_partition('halves')\ndef halves(labels, num_clients, rng):\n    return [labels]\n\n\ndef partition("),
], ids=["engine", "task", "partition"])
def test_adding_an_engine_a_task_or_a_partition_invalidates_no_committed_run(committed, scratch, rel, old, new):
    valid, total = _still_valid(committed, scratch, rel, old, new)
    assert valid == total


@pytest.mark.slow
def test_a_reworded_error_message_leaves_every_committed_run_valid(committed, scratch):
    """Issue 47: a message in validation.py (every run's validation reads it) used to invalidate every run."""
    valid, total = _still_valid(committed, scratch, "validation.py", 'must be a finite number, got {value!r}',
                                'must be finite, not {value!r}')
    assert valid == total
    valid, total = _still_valid(committed, scratch, "validation.py", "if not integer and not math.isfinite(value):",
                                "if not integer and not math.isfinite(value) and value > 0:")
    assert total["admm"] > 0 and valid["admm"] < total["admm"]  # the test beside the message is code


def test_a_name_added_to_an_import_leaves_every_committed_run_valid(committed, scratch):
    """An import of several names was one node: adding ActiveClients to fedvra.py's protocol import moved the keys
    of every FedVRA, FedDyn and two_block run (572), which read that statement's other names."""
    valid, total = _still_valid(committed, scratch, "algorithms/fedvra.py", "from ..protocol import ",
                                "from ..protocol import State, ")
    assert valid == total


def test_an_engine_kernel_edit_invalidates_the_engine_runs_and_leaves_the_admm_family_valid(committed, scratch):
    valid, total = _still_valid(committed, scratch, "engine/clientwise.py", "ROW_ALIGNMENT = ", "ROW_ALIGNMENT = 2 * ")
    assert total["admm"] > 0 and valid["admm"] == total["admm"]
    engine_runs = [f for f in total if f != "admm"]
    assert engine_runs and all(valid[f] == 0 for f in engine_runs)  # every engine run takes the clientwise kernel


def test_an_mnist_constant_edit_leaves_the_qsar_and_least_squares_runs_valid(committed, scratch):
    valid, total = _still_valid(committed, scratch, "data/loaders.py", "MNIST_STATS = ((0.1307,), (0.3081,))",
                                "MNIST_STATS = ((0.1306,), (0.3081,))")
    assert valid["qsar/batched"] == total["qsar/batched"] > 0 and valid["admm"] == total["admm"]
    assert valid["dataset/batched"] < total["dataset/batched"]  # the MNIST runs are invalid
    assert valid["semi_supervised/batched"] == 0 < total["semi_supervised/batched"]  # on MNIST


# ---------------------------------------------------------------------------------------------- a user's code
@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user's own package of two modules on sys.path: an algorithm and the helper module it imports."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "myhelpers.py").write_text("SCALE = 1.0\n\n\ndef scaled(x):\n    return SCALE * x\n")
    (tmp_path / "myalgo.py").write_text(textwrap.dedent("""
        from fedcompanion.algorithms.fedavg import FedAvg, weighted_mean_of_updates
        from myhelpers import scaled

        STEP = 1.0


        class Mine(FedAvg):
            name = "mine-user"

            def server_update(self, task, state, info, uploads):
                return super().server_update(task, state, info, uploads)

            def scale(self, x):
                return scaled(x) * STEP + 0 * weighted_mean_of_updates.__code__.co_argcount
        """))
    yield tmp_path
    for name in ("myalgo", "myhelpers"):
        sys.modules.pop(name, None)
    fp.clear()


def _user_key(tmp_path) -> str:
    for name in ("myalgo", "myhelpers"):
        sys.modules.pop(name, None)
    import myalgo

    return fp.fingerprint([myalgo.Mine])


def test_a_user_algorithms_key_covers_its_helper_module_its_constants_and_the_package_code_it_imports(
        user_module, scratch):
    first = _user_key(user_module)
    helpers = user_module / "myhelpers.py"
    helpers.write_text(helpers.read_text().replace("SCALE = 1.0", "SCALE = 2.0"))
    assert _user_key(user_module) != first  # the helper module's constant (it used to be served the old run)
    helpers.write_text(helpers.read_text().replace("SCALE = 2.0", "SCALE = 1.0"))
    assert _user_key(user_module) == first
    own = user_module / "myalgo.py"
    own.write_text(own.read_text().replace("STEP = 1.0", "STEP = 3.0"))
    assert _user_key(user_module) != first  # its own module-level constant
    own.write_text(own.read_text().replace("STEP = 3.0", "STEP = 1.0"))
    fedavg = scratch / "algorithms/fedavg.py"
    fedavg.write_text(fedavg.read_text().replace(
        "def weighted_mean_of_updates(info, updates, aggregation: str):",
        "def weighted_mean_of_updates(info, updates, aggregation: str = 'normalized'):"))
    fp.ROOT, saved = scratch, fp.ROOT
    try:
        fp.clear()
        assert _user_key(user_module) != first  # the package helper it imports (it used to keep its key)
    finally:
        fp.ROOT = saved


def test_a_notebook_functions_key_covers_the_globals_it_reads():
    """Code with no file (a notebook cell, python -c): its source and the values of the globals it names."""
    space = {"__name__": "__main__"}
    exec("LIMIT = 3\ndef metric(task, config):\n    return lambda x: LIMIT\n", space)
    first = fp.fingerprint([space["metric"]])
    space["LIMIT"] = 4
    assert fp.fingerprint([space["metric"]]) != first
    space["LIMIT"] = 3
    assert fp.fingerprint([space["metric"]]) == first


def _toy_train(*args, **kwargs):
    return train_loop(*args, **kwargs)


def _other_toy_train(*args, **kwargs):
    x, buffers = train_loop(*args, **kwargs)
    return x * 1.0, buffers


def test_a_user_engine_is_in_the_key_and_a_replaced_built_in_keys_by_the_new_code():
    config = ExperimentConfig(task="least_squares", algorithm="fedavg", engine="batched")
    builtin = config.hash()
    saved = ENGINES["batched"]
    try:
        fc.engine.register_engine("batched", _toy_train, probe_loop)
        assert config.hash() != builtin  # not the built-in's results for another engine
    finally:
        ENGINES.register("batched", saved, user=False)
    assert config.hash() == builtin
    assert "batched" not in ENGINES.user
    try:
        toy = ExperimentConfig(task="least_squares", algorithm="fedavg", engine="toy-engine")
        fc.engine.register_engine("toy-engine", _toy_train, probe_loop)
        first = toy.hash()
        assert "toy-engine" in ENGINES.user  # so a sweep's workers receive it
        fc.engine.register_engine("toy-engine", _other_toy_train, probe_loop)
        assert toy.hash() != first  # the user engine's code is in the key (it used to keep the cached run)
    finally:
        ENGINES.pop("toy-engine")


# ---------------------------------------------------------------------------------------------- data and timings
def test_the_key_holds_the_checksums_of_the_data_files_the_task_reads(tmp_path, monkeypatch):
    qsar = ExperimentConfig(task="qsar", algorithm="fedavg")
    assert list(qsar.data_files()) == ["qsar_oral_toxicity/qsar_oral_toxicity.csv.gz"]
    assert ExperimentConfig(task="least_squares").data_files() == {}
    mnist = ExperimentConfig(task="dataset", task_args={"dataset": "mnist"})
    assert all(f.startswith("mnist/") for f in mnist.data_files()) and len(mnist.data_files()) == 4
    shipped, mnist_shipped = qsar.hash(), mnist.hash()
    data = tmp_path / "data"
    shutil.copytree(Path(fc.data.files.data_dir()), data)
    monkeypatch.setenv("FEDCOMPANION_DATA", str(data))
    assert qsar.hash() == shipped  # a copy of the shipped data: the same key (the folder is not in it)
    sums = (data / "SHA256SUMS").read_text()
    other = hashlib.sha256(b"other labels").hexdigest()
    (data / "SHA256SUMS").write_text("\n".join(
        f"{other}  {name}" if name.startswith("qsar") else line
        for line in sums.splitlines() for name in [line.split()[-1]]) + "\n")
    assert qsar.hash() != shipped  # other QSAR data: not the shipped data's results
    assert mnist.hash() == mnist_shipped  # the MNIST runs read no QSAR file: still valid


def test_every_shipped_file_a_committed_task_reads_is_declared(monkeypatch):
    """The declaration is the contract: building each kind of committed task reads only the files its key names."""
    from fedcompanion.data import loaders
    from fedcompanion.experiments import build_task

    read = []
    original = loaders.verified_path
    monkeypatch.setattr(loaders, "verified_path", lambda rel: read.append(rel) or original(rel))
    loaders._mnist.cache_clear()
    for config in (ExperimentConfig(task="qsar", task_args={"num_clients": 4}, seed=11),
                   ExperimentConfig(task="dataset", task_args={"num_clients": 4, "partition_scheme": "iid"},
                                    seed=11),
                   ExperimentConfig(task="semi_supervised", task_args={"num_clients": 4}, seed=11)):
        read.clear()
        build_task(config)
        assert read and set(read) <= set(config.data_files()), (config.task, read)
    loaders._mnist.cache_clear()


# ---------------------------------------------------------------------------------------------- reaching the workers
@pytest.fixture
def interactive_main(monkeypatch):
    """A ``__main__`` with no file, as in a notebook kernel or ``python -c``; returns a namespace in it."""
    import types

    main = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    return main.__dict__


def test_an_interactively_defined_entry_is_refused_before_any_run_and_a_loader_travels_as_arrays(
        interactive_main, tmp_path):
    """It pickles by reference, so the old check let it through and the workers died (BrokenProcessPool)."""
    from fedcompanion.data.loaders import Arrays, transportable
    from fedcompanion.experiments import TASKS, sweep

    exec("import fedcompanion as fc\n"
         "def builder(seed):\n    return fc.tasks.least_squares_task(num_clients=3, dim=4, seed=seed)\n"
         "def loader():\n    return LOADED\n", interactive_main)
    interactive_main["LOADED"] = _toy_arrays()
    assert isinstance(transportable("mine", interactive_main["loader"]), Arrays)
    try:
        fc.register_task("interactive-task", interactive_main["builder"])
        configs = [ExperimentConfig(task="interactive-task", rounds=1, clients_per_round=None, seed=s)
                   for s in (0, 1)]
        with pytest.raises(fc.ConfigError, match="'interactive-task' cannot be sent .*defined interactively"):
            sweep(configs, tmp_path, jobs=2, progress=False)
        assert not list(tmp_path.glob("*.json"))  # refused before any run
    finally:
        TASKS.pop("interactive-task")


def _toy_arrays():
    import torch

    from fedcompanion.data.loaders import ArrayDataset

    x = torch.arange(24.0).view(12, 2)
    return ArrayDataset(x, (x[:, 0] > 10).long(), 2), None


def test_a_script_without_a_main_guard_is_refused_before_it_starts_workers(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        from fedcompanion.experiments import ExperimentConfig, sweep
        configs = [ExperimentConfig(task="least_squares", task_args=dict(num_clients=3, dim=4), rounds=1,
                                    clients_per_round=None, seed=s) for s in (0, 1)]
        sweep(configs, {str(tmp_path / "out")!r}, jobs=2, progress=False)
        """))
    import subprocess

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "without an `if __name__ == \"__main__\":` guard" in done.stderr, done.stderr
    assert not list((tmp_path / "out").glob("*.json"))


@pytest.mark.slow
def test_a_main_scripts_algorithm_task_and_metric_reach_two_workers(tmp_path):
    """Issue 47 group 3: definitions in a guarded main script failed with jobs=2 ("no verified result ... stored
    under [...], the sweep looks for [...]": the workers computed other keys). They run, and a second sweep in a new
    process finds them all cached."""
    script = tmp_path / "mine.py"
    script.write_text(textwrap.dedent(f"""
        import fedcompanion as fc
        from fedcompanion.algorithms.fedavg import FedAvg
        from fedcompanion.experiments import ExperimentConfig, register_metric, register_task, sweep


        @fc.register
        class MyAvg(FedAvg):
            name = "myavg-main"


        def my_task(seed=0):
            return fc.tasks.least_squares_task(num_clients=4, dim=3, seed=seed)


        def spread(task, config):
            return lambda x: x.abs().max()


        register_task("my-main-task", my_task)
        register_metric("spread-main", spread)

        if __name__ == "__main__":
            configs = [ExperimentConfig(task="my-main-task", algorithm="myavg-main", rounds=2, clients_per_round=2,
                                        lr=0.1, seed=s, metrics=["spread-main"]) for s in range(3)]
            runs = sweep(configs, {str(tmp_path / "out")!r}, jobs=2, progress=False).attrs["runs"]
            print(sorted(runs.status), len(list(__import__("pathlib").Path({str(tmp_path / "out")!r}).glob("*.json"))))
        """))
    import subprocess

    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == "['ok', 'ok', 'ok'] 3", done.stdout


@pytest.mark.slow
def test_a_users_model_runs_from_a_sweep_with_two_jobs_and_its_code_is_in_the_key(tmp_path):
    """A model registered in a user's file (``fc.register_model``) runs from a config with jobs=2; a new process
    finds its runs cached; an edit of the model's code changes their key (the registry is opaque to the fingerprint,
    so the key adds the entry a config names: without that root, the edit would serve the old runs)."""
    (tmp_path / "mymodel.py").write_text(textwrap.dedent("""
        import torch
        import fedcompanion as fc

        WIDTH = 8


        @fc.register_model("tiny-mlp")
        def tiny(in_features, num_classes, **options):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(in_features, WIDTH), torch.nn.ReLU(),
                                       torch.nn.Linear(WIDTH, num_classes))
        """))
    out = tmp_path / "out"
    script = tmp_path / "go.py"
    script.write_text(textwrap.dedent(f"""
        import mymodel  # noqa: F401  (registers tiny-mlp)
        import sys

        from fedcompanion.experiments import ExperimentConfig, is_cached, sweep

        if __name__ == "__main__":
            configs = [ExperimentConfig(task="synthetic", task_args=dict(num_clients=4, model="tiny-mlp"), rounds=2,
                                        clients_per_round=2, lr=0.1, seed=s) for s in range(3)]
            cached = [is_cached(c, {str(out)!r}) for c in configs]
            if sys.argv[1:] == ["run"]:
                runs = sweep(configs, {str(out)!r}, jobs=2, progress=False).attrs["runs"]
                print(cached, sorted(runs.status))
            else:
                print(cached)
        """))
    import subprocess

    def go(*args):
        done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    assert go("run") == "[False, False, False] ['ok', 'ok', 'ok']"
    assert go() == "[True, True, True]"  # a new process finds every run in the cache
    (tmp_path / "mymodel.py").write_text((tmp_path / "mymodel.py").read_text().replace("WIDTH = 8", "WIDTH = 9"))
    assert go() == "[False, False, False]"  # the model's code is in the key: none of the old runs serves it


def test_every_registration_function_of_the_package_is_exported():
    import inspect
    import pkgutil

    found = set()
    for info in pkgutil.walk_packages(fc.__path__, "fedcompanion."):
        if ".reproduction" in info.name:
            continue
        module = __import__(info.name, fromlist=["_"])
        found |= {n for n, f in vars(module).items() if n.startswith("register") and inspect.isfunction(f)
                  and f.__module__ == info.name}
    assert found and found <= set(fc.__all__), f"not exported from fc: {sorted(found - set(fc.__all__))}"
