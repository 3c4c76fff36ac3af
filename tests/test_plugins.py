"""Every plug-in kind is registered the same way: ``fc.register_<kind>(name, entry)``, or ``@fc.register_<kind>(name)``
as a decorator, checked by the kind's own rule; a user's model, loss and sampling, each in a file of its own, run from
a YAML sweep file (its ``plugins:``) with jobs=2 and key their runs by their code."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch

import fedcompanion as fc
from fedcompanion.algorithms.fedavg import FedAvg
from fedcompanion.losses import Loss
from fedcompanion.registry import _ALL


class _ToyLoss(Loss):
    name = "toy-loss"

    def per_sample(self, out, y):
        return (out.squeeze(-1) - y) ** 2


class _ToyAvg(FedAvg):
    name = "toy-avg"


def _sampler(num_clients, clients_per_round, weights):
    return fc.engine.sampling.FullParticipation(num_clients)


ENTRIES = {  # one entry each kind accepts, and one it refuses
    "algorithm": (_ToyAvg, 42),
    "engine": (fc.engine.train_loop, 42),
    "task": (lambda seed=0: None, lambda: None),
    "dataset": (lambda: None, 42),
    "partition": (lambda labels, num_clients, rng: [], 42),
    "metric": (lambda task, config: None, 42),
    "model": (lambda in_features, num_classes, **options: None, 42),
    "loss": (_ToyLoss, 42),
    "sampling": (_sampler, 42),
}


def test_every_registry_has_one_exported_register_function_of_one_shape():
    assert set(_ALL) == set(ENTRIES)
    for kind, (good, bad) in ENTRIES.items():
        register = getattr(fc, f"register_{kind}")
        name = getattr(good, "name", f"toy-{kind}")
        try:
            assert register(name)(good) is good  # the decorator gives back what it decorated
            assert name in _ALL[kind] and name in _ALL[kind].user  # registered after the import: a user's entry
            _ALL[kind].pop(name)
            register(name, good)  # the call
            assert name in _ALL[kind]
            with pytest.raises(fc.ConfigError, match=repr(name) if kind != "dataset" else "loader"):
                register(name, bad)
        finally:
            _ALL[kind].pop(name, None)


def test_a_loss_or_an_algorithm_is_registered_under_its_own_name():
    with pytest.raises(fc.ConfigError, match="name attribute"):
        fc.register_loss("other-name", _ToyLoss)
    with pytest.raises(fc.ConfigError, match="name attribute"):
        fc.register_algorithm("other-name", _ToyAvg)
    assert "other-name" not in _ALL["loss"] and "other-name" not in _ALL["algorithm"]


def test_a_registered_loss_is_used_by_name_and_a_sampling_by_name():
    fc.register_loss(_ToyLoss.name, _ToyLoss)
    fc.register_sampling("toy-all", _sampler)
    try:
        x = torch.randn(12, 3)
        task = fc.tasks.from_client_arrays("toy", [(x[:6], x[:6, 0]), (x[6:], x[6:, 1])], torch.nn.Linear(3, 1),
                                           "toy-loss")
        assert isinstance(task.loss, _ToyLoss)
        result = fc.run(task, fc.make("fedavg"), 2, clients_per_round=1, sampling="toy-all", lr=0.1)
        assert result.metric("uploaded_floats").iloc[-1] == 2 * 2 * task.num_params  # both clients, every round
        with pytest.raises(fc.ConfigError, match="toy-nothing"):
            fc.run(task, fc.make("fedavg"), 2, clients_per_round=1, sampling="toy-nothing")
    finally:
        _ALL["loss"].pop(_ToyLoss.name)
        _ALL["sampling"].pop("toy-all")


def test_two_block_asks_the_loss_whether_its_targets_are_a_private_block():
    task = fc.tasks.least_squares_task(num_clients=3, dim=4)
    with pytest.raises(fc.ConfigError, match="private block"):
        fc.make("two_block").init(task, torch.zeros(task.num_params))
    assert fc.losses.get_loss("cluster").private_block and fc.losses.get_loss("soft_labels").private_block
    assert not any(fc.losses.get_loss(n).private_block for n in ("squared", "logistic", "cross_entropy"))


@pytest.mark.slow
def test_a_users_model_loss_and_sampling_run_from_a_sweep_file_with_two_jobs_and_their_code_is_in_the_key(tmp_path):
    """A model, a loss and a sampling, each in a user's file, named by a YAML sweep file (``plugins:`` imports the
    files): ``fedcompanion run --jobs 2`` runs them, a second call finds every run cached, and an edit of any of the
    three files gives every run a new key (a registry is opaque to the fingerprint: the config adds the entries it
    names)."""
    (tmp_path / "mymodel.py").write_text(textwrap.dedent("""
        import torch
        import fedcompanion as fc

        BIAS = True


        @fc.register_model("tiny-linear")
        def tiny(in_features, num_classes, **options):
            return torch.nn.Linear(in_features, 1, bias=BIAS)
        """))
    (tmp_path / "myloss.py").write_text(textwrap.dedent("""
        import torch
        import fedcompanion as fc

        MARGIN = 1.0


        @fc.register_loss("squared-hinge")
        class SquaredHinge(fc.losses.Loss):
            name = "squared-hinge"

            def per_sample(self, out, y):
                return torch.relu(MARGIN - (2 * y - 1) * out.squeeze(-1)) ** 2
        """))
    (tmp_path / "mysampling.py").write_text(textwrap.dedent("""
        import numpy as np
        import fedcompanion as fc
        from fedcompanion.engine.sampling import Sampler

        OFFSET = 0


        class RoundRobin(Sampler):
            def __init__(self, num_clients, m):
                super().__init__(num_clients)
                self.m = m

            def sample(self, r, rng):
                active = np.sort((np.arange(self.m) + r * self.m + OFFSET) % self.num_clients)
                return active, np.full(self.num_clients, self.m / self.num_clients)


        @fc.register_sampling("round-robin")
        def round_robin(num_clients, clients_per_round, weights):
            return RoundRobin(num_clients, clients_per_round)
        """))
    (tmp_path / "sweep.yaml").write_text(textwrap.dedent("""
        plugins: [mymodel.py, myloss.py, mysampling.py]
        base:
          task: dataset
          task_args: {dataset: qsar, num_clients: 4, model: tiny-linear, loss: squared-hinge}
          rounds: 2
          clients_per_round: 2
          lr: 0.01
          sampling: round-robin
          local: {steps: 3, batch_size: 16}
        grid:
          seed: [0, 1, 2]
        """))
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"  # the command runs from another folder: the plugins are found by the file's
    elsewhere.mkdir()

    def run():
        done = subprocess.run([sys.executable, "-m", "fedcompanion.cli", "run", str(tmp_path / "sweep.yaml"),
                               "--jobs", "2", "--results", str(out)], capture_output=True, text=True, timeout=300,
                              cwd=elsewhere)
        assert done.returncode == 0, done.stderr
        assert "3 run(s)" in done.stdout and done.stdout.count(" ok") == 3, done.stdout
        return {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")}

    def keys():
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            from pathlib import Path
            from fedcompanion.cli import load_configs
            print(" ".join(c.hash() for c in load_configs(Path({str(tmp_path / "sweep.yaml")!r}))))
            """)], capture_output=True, text=True, timeout=300, cwd=elsewhere)
        assert done.returncode == 0, done.stderr
        return set(done.stdout.split())

    first = run()
    assert len(first) == 3
    assert run() == first  # a new process: every run from the cache, none written again
    before = keys()
    assert {f"{k}.json" for k in before} == set(first)
    edits = (("mymodel.py", "BIAS = True", "BIAS = False"), ("myloss.py", "MARGIN = 1.0", "MARGIN = 2.0"),
             ("mysampling.py", "OFFSET = 0", "OFFSET = 1"))
    for file, old, new in edits:  # each edit gives every run a new key: the entry's code is in the key
        (tmp_path / file).write_text((tmp_path / file).read_text().replace(old, new))
        after = keys()
        assert not after & before, file
        before = after


def test_a_sweep_files_plugins_are_checked():
    from fedcompanion.cli import import_plugins

    with pytest.raises(fc.ConfigError, match="there is no file"):
        import_plugins({"plugins": ["nowhere.py"]}, Path("/nonexistent"))
    with pytest.raises(fc.ConfigError, match="cannot be imported"):
        import_plugins({"plugins": ["no_such_module_anywhere"]}, Path("."))
    with pytest.raises(fc.ConfigError, match="list of Python files"):
        import_plugins({"plugins": "mymodel.py"}, Path("."))
    assert import_plugins({"plugins": ["json"], "rounds": 3}, Path(".")) == {"rounds": 3}


def test_the_admm_family_runs_from_a_sweep_file_on_a_users_task_with_two_jobs(tmp_path):
    """CEADMM, ICEADMM and LIADMM are ordinary algorithms: a YAML sweep file names them on a user's task (a linear
    regression registered in a plugin file), ``fedcompanion run --jobs 2`` runs them in worker processes, and the
    stored runs are what ``fc.run`` gives in this process (the same code path, bit for bit)."""
    (tmp_path / "mytask.py").write_text(textwrap.dedent("""
        import fedcompanion as fc


        @fc.register_task("my-regression")
        def my_regression(seed=0):
            return fc.tasks.least_squares_task(num_clients=6, dim=4, seed=seed)
        """))
    (tmp_path / "sweep.yaml").write_text(textwrap.dedent("""
        plugins: [mytask.py]
        base: {task: my-regression, rounds: 12, clients_per_round: null, per_client_metrics: false, seed: 3}
        grid:
          algorithm: [ceadmm, iceadmm, liadmm]
        """))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "fedcompanion.cli", "run", str(tmp_path / "sweep.yaml"), "--jobs",
                           "2", "--results", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3 run(s)" in done.stdout and done.stdout.count(" ok") == 3, done.stdout
    task = fc.tasks.least_squares_task(num_clients=6, dim=4, seed=3)
    stored = {json.loads(p.read_text())["config"]["algorithm"]: pd.read_csv(out / f"{p.stem}.csv.gz")
              for p in out.glob("*.json")}
    for name in ("ceadmm", "iceadmm", "liadmm"):
        here = fc.run(task, fc.make(name), 12, seed=3, per_client_metrics=False).history
        assert stored[name][["round", "metric", "value"]].equals(here[["round", "metric", "value"]]), name
