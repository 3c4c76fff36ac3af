"""Every file read back is verified: damaged results are recomputed (with a warning naming the file), a
damaged MNIST cache is rebuilt, and concurrent processes never see a half-written file. A run's numbers
depend only on its config and seed: not on jobs, threads, sweep order or what was cached before."""
import gzip
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from fedcompanion.experiments import ExperimentConfig, is_cached, load_params, load_result, sweep
from fedcompanion.validation import ConfigError


def _cfg(**kw):
    base = dict(task="least_squares", task_args=dict(num_clients=4, dim=3), algorithm="fedvra", rounds=3,
                clients_per_round=2, lr=0.05, local=dict(steps=2, batch_size=None), save_params=True)
    return ExperimentConfig(**(base | kw))


def _damage(path, how):
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"\x00not what was stored\xff" * 3)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "delete":
        path.unlink()
    elif how == "header_only":
        path.write_bytes(gzip.compress(b"round,client,metric,value\n", mtime=0))
    elif how == "edit_value":
        text = gzip.decompress(data).decode().replace("train_loss,", "train_loss,1", 1)
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    elif how == "wrong_shape":
        torch.save(torch.zeros(7, dtype=torch.float64), path)
    elif how == "json_missing_key":
        meta = json.loads(data)
        del meta["history"]
        path.write_text(json.dumps(meta))
    elif how == "json_other_config":
        meta = json.loads(data)
        meta["config"]["seed"] = 99
        path.write_text(json.dumps(meta))


DAMAGE = [("json", "garbage"), ("json", "empty"), ("json", "json_missing_key"), ("json", "json_other_config"),
          ("csv.gz", "truncate"), ("csv.gz", "header_only"), ("csv.gz", "edit_value"), ("csv.gz", "garbage"),
          ("csv.gz", "delete"), ("pt", "wrong_shape"), ("pt", "garbage"), ("pt", "delete"), ("pt", "truncate")]


@pytest.mark.parametrize("ext,how", DAMAGE, ids=[f"{e}-{h}" for e, h in DAMAGE])
def test_damaged_results_are_recomputed_with_a_warning(tmp_path, ext, how):
    config = _cfg()
    original = sweep([config], tmp_path, jobs=1, progress=False)
    params = load_params(config, tmp_path)
    path = tmp_path / f"{config.hash()}.{ext}"
    _damage(path, how)
    if how in ("json_missing_key", "garbage", "json_other_config") or ext != "json":
        with pytest.warns(UserWarning, match=f"{config.hash()}"):
            assert not is_cached(config, tmp_path)
    again = sweep([config], tmp_path, jobs=1, progress=False)
    assert again.equals(original), "recomputed to the same numbers"
    assert torch.equal(load_params(config, tmp_path), params)
    assert is_cached(config, tmp_path)


def test_loading_a_missing_run_is_a_named_error(tmp_path):
    with pytest.raises(ConfigError, match="not run yet"):
        load_result(_cfg(label="never run"), tmp_path)


def test_a_code_change_is_a_cache_miss(tmp_path, monkeypatch):
    from fedcompanion.experiments import config as experiments

    config = _cfg()
    sweep([config], tmp_path, jobs=1, progress=False)
    assert is_cached(config, tmp_path)
    monkeypatch.setattr(experiments, "fingerprint", lambda roots: "other-code")
    assert not is_cached(config, tmp_path)


def test_a_failing_config_is_reported_and_the_others_run(tmp_path):
    good = _cfg(label="good")
    bad = _cfg(label="bad", task_args=dict(num_clients=4, dim=3), clients_per_round=9)  # fails inside the run
    with pytest.raises(RuntimeError, match="1 of 2 runs failed \\(bad\\)"):
        sweep([bad, good], tmp_path, jobs=1, progress=False)
    assert is_cached(good, tmp_path), "the good run ran and was stored before the error"
    with pytest.warns(UserWarning, match="1 of 2 runs failed \\(bad\\)"):
        frame = sweep([bad, good], tmp_path, jobs=1, progress=False, on_failure="warn")
    runs = frame.attrs["runs"].set_index("label")
    assert runs.loc["bad", "status"] == "failed" and "clients_per_round" in runs.loc["bad", "error"]
    assert runs.loc["good", "status"] == "ok" and set(frame.label) == {"good"}
    assert not is_cached(bad, tmp_path), "failures are not cached"


def test_sweep_returns_the_config_columns(tmp_path):
    frame = sweep([_cfg(hyperparameters={"gamma": 0.3, "dual_stepsize": 0.5}, lr=0.02)], tmp_path, jobs=1,
                  progress=False)
    assert {"lr", "gamma", "dual_stepsize", "seed", "algorithm"} <= set(frame.columns)
    assert set(frame.gamma) == {0.3} and set(frame.lr) == {0.02}


FLOAT32 = [ExperimentConfig(task="dataset", task_args=dict(dataset="mnist", num_clients=8, partition_scheme="dirichlet",
                                                           alpha=0.5, hidden=[32]),
                            algorithm=name, hyperparameters=hp, rounds=3, clients_per_round=3, lr=0.1,
                            local=dict(steps_range=[2, 6], batch_size=16), per_client_metrics=False, seed=seed)
           for name, hp in [("fedavg", {}), ("fedvra", {"gamma": 0.1})] for seed in (0, 1)]


@pytest.mark.slow
def test_float32_results_do_not_depend_on_jobs_or_the_cache(tmp_path):
    serial = sweep(FLOAT32, tmp_path / "a", jobs=1, progress=False)
    parallel = sweep(FLOAT32, tmp_path / "b", jobs=2, progress=False)
    assert serial.equals(parallel)
    partly = tmp_path / "c"  # half the runs cached first (in another order), then the rest in parallel
    sweep(FLOAT32[::-2], partly, jobs=1, progress=False)
    assert sweep(FLOAT32, partly, jobs=2, progress=False).equals(serial)
    torch.set_num_threads(2)  # the caller's thread count does not reach the runs
    assert sweep(FLOAT32, tmp_path / "d", jobs=1, progress=False).equals(serial)


LOAD = textwrap.dedent("""
    import fedcompanion as fc
    train, test = fc.data.load_dataset("mnist")
    print(int(train.y.sum()), int(test.y.sum()))
""")


def test_two_processes_read_mnist_at_once_and_write_no_cache(tmp_path):
    env = {"FEDCOMPANION_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", LOAD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-500:] for _, err in outputs]
    assert outputs[0][0] == outputs[1][0] and outputs[0][0].split() == ["267236", "44434"]
    assert not list(tmp_path.iterdir())  # read from the shipped files: nothing decompressed to disk


def test_a_damaged_shipped_mnist_file_is_named(tmp_path, monkeypatch):
    import shutil

    import fedcompanion as fc
    from fedcompanion.data.files import data_dir

    shutil.copytree(data_dir(), tmp_path / "data")
    monkeypatch.setenv("FEDCOMPANION_DATA", str(tmp_path / "data"))
    labels = tmp_path / "data" / "mnist" / "train-labels-idx1-ubyte.gz"
    labels.chmod(0o644)
    data = bytearray(labels.read_bytes())
    data[100] ^= 0xFF  # the review's case was one label of 200 making a 201-class model: the checksum stops it
    labels.write_bytes(bytes(data))
    with pytest.raises(fc.data.DataError, match="train-labels-idx1-ubyte.gz is corrupted"):
        fc.data.load_dataset("mnist")


def test_a_run_stopped_by_its_tolerance_is_stored_and_served(tmp_path):
    """The ADMM family's status 'converged' (its stopping tolerance met) is a whole run: stored, then read back."""
    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=3), algorithm="iceadmm",
                              rounds=500, tol=1e-20, clients_per_round=None)
    first = sweep([config], tmp_path, jobs=1, progress=False)
    assert first.attrs["runs"].status.tolist() == ["converged"]
    assert first["round"].max() < 500
    again = sweep([config], tmp_path, jobs=1, progress=False)
    assert again.attrs["runs"].status.tolist() == ["converged"] and again.equals(first)
