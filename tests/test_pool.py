"""One pool for every run, on this machine or a Dask cluster (a LocalCluster of 2 worker processes on 127.0.0.1):
the cluster computes what the local pool computes, bit for bit; a worker killed mid-run costs only that run's time
(Dask hands it to a live worker) and leaves no partial file; a user's registered algorithm reaches the workers, and
one defined interactively is refused by name before any run."""
import os
import signal
import sys
import textwrap
import threading
import time

import pandas as pd
import pytest

import fedcompanion as fc
from fedcompanion.data.loaders import LOADERS
from fedcompanion.experiments import ExperimentConfig, load_result, sweep
from fedcompanion.experiments.pool import SCHEDULER_VARIABLE

distributed = pytest.importorskip("distributed")


def _configs(seeds=(0, 1)):
    base = dict(task="least_squares", task_args=dict(num_clients=6, dim=5), rounds=4, clients_per_round=3,
                local=dict(steps=2, batch_size=8), per_client_metrics=False)
    return [ExperimentConfig(algorithm=a, seed=s, **base, **hp) for s in seeds
            for a, hp in (("fedavg", {}), ("fedvra", {"hyperparameters": {"gamma": 0.5}}))] + \
        [ExperimentConfig(task="least_squares", task_args=dict(num_clients=6, dim=5), algorithm="iceadmm",
                          hyperparameters=dict(k0=3), rounds=30, seed=s, clients_per_round=None) for s in seeds]


def _histories(frame: pd.DataFrame) -> dict:
    return {h: g[["round", "client", "metric", "value"]].reset_index(drop=True) for h, g in frame.groupby("hash")}


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[h].equals(b[h]) for h in a)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client


@pytest.mark.slow
def test_the_cluster_computes_what_the_local_pool_computes_bit_for_bit(client, tmp_path, monkeypatch):
    local = _histories(sweep(_configs(), tmp_path / "local", jobs=2, progress=False))
    given = _histories(sweep(_configs()[::-1], tmp_path / "given", executor=client.get_executor(pure=False),
                             progress=False))  # another order, another pool
    monkeypatch.setenv(SCHEDULER_VARIABLE, client.scheduler.address)
    named = _histories(sweep(_configs(), tmp_path / "named", jobs=1, progress=False))
    assert _equal(local, given) and _equal(local, named)
    other = _histories(sweep(_configs(seeds=(2,)), tmp_path / "named", progress=False))  # the comparison can fail
    assert not any(other[h].equals(local[g]) for h in other for g in local)


@pytest.mark.slow
def test_a_worker_killed_mid_run_costs_only_that_run(client, tmp_path):
    slow = ExperimentConfig(task="least_squares", task_args=dict(num_clients=20, dim=30), algorithm="iceadmm",
                            rounds=20000, eval_every=1000, seed=0, clients_per_round=None)
    done: dict = {}
    worker = threading.Thread(target=lambda: done.setdefault("frame", sweep(
        [slow], tmp_path / "dask", executor=client.get_executor(pure=False), progress=False)))
    worker.start()
    deadline = time.monotonic() + 60
    while not any(client.processing().values()):  # the run is on a worker
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    time.sleep(0.5)
    busy = next(address for address, keys in client.processing().items() if keys)
    pid = client.run(os.getpid, workers=[busy])[busy]
    os.kill(pid, signal.SIGKILL)
    worker.join(timeout=240)
    assert not worker.is_alive() and done["frame"].attrs["runs"].status.tolist() == ["ok"]
    assert sorted(p.name.split(".", 1)[1] for p in (tmp_path / "dask").iterdir()) == ["csv.gz", "json"]
    reference = sweep([slow], tmp_path / "local", jobs=1, progress=False)
    assert load_result(slow, tmp_path / "dask")[0].equals(load_result(slow, tmp_path / "local")[0])
    assert reference.attrs["runs"].status.tolist() == ["ok"]


def test_a_users_algorithm_reaches_the_workers_and_an_interactive_one_is_refused(client, tmp_path, monkeypatch):
    module = tmp_path / "my_fedavg.py"
    module.write_text(textwrap.dedent("""
        import fedcompanion as fc
        from fedcompanion.algorithms.fedavg import FedAvg


        @fc.register
        class HalfAvg(FedAvg):
            name = "halfavg-dask"

            def __init__(self):
                super().__init__(server_lr=0.5)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    client.upload_file(str(module))  # what a real deployment does (docs/usage.md)
    import my_fedavg  # noqa: F401

    base = _configs()[0]
    mine = [ExperimentConfig(**{**base.__dict__, "algorithm": "halfavg-dask", "seed": s}) for s in (0, 1)]
    try:
        remote = _histories(sweep(mine, tmp_path / "dask", executor=client.get_executor(pure=False), progress=False))
        assert _equal(remote, _histories(sweep(mine, tmp_path / "here", jobs=1, progress=False)))
        main = type(sys)("__main__")
        monkeypatch.setitem(sys.modules, "__main__", main)
        exec("from fedcompanion.algorithms.fedavg import FedAvg\n"
             "class Interactive(FedAvg):\n    name = 'interactive-dask'\n", main.__dict__)
        fc.register(main.Interactive)
        with pytest.raises(fc.ConfigError, match="'interactive-dask' cannot be sent .*defined interactively"):
            sweep([ExperimentConfig(**{**base.__dict__, "algorithm": "interactive-dask"})], tmp_path / "refused",
                  executor=client.get_executor(pure=False), progress=False)
        assert not list((tmp_path / "refused").glob("*.json"))
    finally:
        fc.algorithms.REGISTRY.pop("halfavg-dask", None)
        fc.algorithms.REGISTRY.pop("interactive-dask", None)


# ------------------------------------------------------------------------------------------- fourth pass
def test_a_worker_running_other_package_code_is_refused_even_with_user_entries(client, tmp_path):
    """The old check was skipped whenever the asking process had registered anything (every notebook that extends
    the package): a worker with another package version computed runs stored under this code's key."""
    fc.register_dataset("toy-fourth", train=_toy_split(0), test=_toy_split(1))  # an entry: the old check was skipped
    configs = [ExperimentConfig(task="dataset", task_args={"dataset": "toy-fourth", "num_clients": 2, "model":
                                                           "logistic"}, rounds=1, clients_per_round=2, seed=0)]
    client.run(_pretend_other_code)
    try:
        with pytest.raises(RuntimeError, match="runs other fedcompanion code"):
            sweep(configs, tmp_path, executor=client.get_executor(pure=False), progress=False)
        assert not list(tmp_path.glob("*.json"))  # nothing stored
    finally:  # undone in place: a restart waited 120 s and timed out on a loaded 2-core machine (make test's lanes)
        client.run(_code_as_it_is)
        assert set(client.run(_worker_code).values()) == {_worker_code()}  # the workers are as they were
        LOADERS.pop("toy-fourth")
        LOADERS.user.discard("toy-fourth")


def test_a_run_records_the_platform_of_the_worker_that_computed_it(client, tmp_path):
    client.run(_pretend_other_platform)
    try:
        sweep(_configs(seeds=(0,))[:1], tmp_path, executor=client.get_executor(pure=False), progress=False)
        meta = load_result(_configs(seeds=(0,))[0], tmp_path)[1]
        assert meta["platform"]["cpu"] == "the worker's CPU"
    finally:  # undone in place: restarting the workers timed out on a loaded 2-core machine (one never came back)
        client.run(_platform_as_it_is)


def _pretend_other_code():
    from fedcompanion.experiments.config import ExperimentConfig

    if not hasattr(ExperimentConfig, "_own_package_code"):
        ExperimentConfig._own_package_code = ExperimentConfig.package_code
    ExperimentConfig.package_code = lambda self: "0ther0ther00"


def _code_as_it_is():
    from fedcompanion.experiments.config import ExperimentConfig

    ExperimentConfig.package_code = ExperimentConfig._own_package_code


def _worker_code():
    from fedcompanion.experiments.config import ExperimentConfig

    return ExperimentConfig(task="least_squares").package_code()


def _pretend_other_platform():
    import fedcompanion.experiments.pool as pool
    from fedcompanion.infra.machine import numerical_platform

    pool.numerical_platform = lambda: {**numerical_platform(), "cpu": "the worker's CPU"}


def _platform_as_it_is():
    import fedcompanion.experiments.pool as pool
    from fedcompanion.infra.machine import numerical_platform

    pool.numerical_platform = numerical_platform


def _toy_split(seed):
    import torch

    from fedcompanion.data.loaders import ArrayDataset

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(20, 3, generator=g)
    return ArrayDataset(x, (x[:, 0] > 0).long(), 2)


def test_a_scheduler_that_never_answers_fails_in_seconds_and_a_malformed_address_in_words(tmp_path, monkeypatch):
    import socket

    from fedcompanion.experiments import pool

    with socket.socket() as tarpit:  # accepts every connection and never says a word
        tarpit.bind(("127.0.0.1", 0))
        tarpit.listen(8)
        monkeypatch.setenv(SCHEDULER_VARIABLE, f"tcp://127.0.0.1:{tarpit.getsockname()[1]}")
        monkeypatch.setattr(pool, "CONNECT_SECONDS", 2.0)
        outcome: dict = {}

        def attempt():
            try:
                sweep(_configs(seeds=(0,))[:2], tmp_path, jobs=1, progress=False)
            except fc.ConfigError as error:
                outcome["error"] = str(error)

        started = time.monotonic()
        thread = threading.Thread(target=attempt, daemon=True)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "the sweep hung on a scheduler that never answers"
        assert "did not answer within 2 s" in outcome["error"] and time.monotonic() - started < 30
    for bad in ("tcp://127.0.0.1", "http://127.0.0.1:8786", "127.0.0.1:port"):
        with pytest.raises(fc.ConfigError, match="is not a Dask scheduler's address"):
            pool.check_address(bad)
