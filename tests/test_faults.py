"""Issue 28's causes, each with a test that failed before its fix: nothing silently wrong."""
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import fedcompanion as fc
from fedcompanion.protocol import LocalObjective, LocalResult, RoundInfo


@pytest.mark.parametrize("q", [0.5, 1.0, 2.0])
def test_qfedavg_with_a_client_at_zero_loss_stays_finite(lsq_sized, q):
    """A client whose loss is exactly 0 has F^q = 0 and contributes nothing (0 ** (q - 1) * 0 was NaN for q < 1)."""
    info = RoundInfo(0, torch.tensor([1, 3]), torch.ones(4, dtype=torch.float64), torch.tensor([1, 1]), 0.5,
                     lsq_sized.weights)
    x0 = torch.tensor([1.0, 0.0, -1.0, 0.5], dtype=torch.float64)
    x_local = torch.stack([x0, x0 + 0.2])  # the client at zero loss has zero gradient: it does not move
    losses = torch.tensor([0.0, 0.5], dtype=torch.float64)
    algo = fc.make("qfedavg", q=q)
    objective = LocalObjective.sgd(x0, info.steps, info.lr)
    _, up = algo.client_update(lsq_sized, {"x": x0}, None, info, LocalResult(x_local, objective, (losses, None)))
    dw = 2.0 * (x0 - x_local[1])
    assert torch.isfinite(up["h"]).all() and float(up["h"][0]) == 0.0
    expected = x0 - losses[1] ** q * dw / (q * losses[1] ** (q - 1) * (dw * dw).sum() + 2.0 * losses[1] ** q)
    new = algo.server_update(algo.init_server(lsq_sized, x0), info, up)
    assert torch.allclose(new.x, expected, rtol=1e-15, atol=0)


def test_qfedavg_with_every_client_at_zero_loss_does_not_move(lsq_sized):
    info = RoundInfo(0, torch.tensor([0, 1]), torch.ones(4, dtype=torch.float64), torch.tensor([1, 1]), 0.5,
                     lsq_sized.weights)
    x0 = torch.ones(4, dtype=torch.float64)
    algo = fc.make("qfedavg", q=1.0)
    result = LocalResult(torch.stack([x0, x0]), LocalObjective.sgd(x0, info.steps, info.lr),
                         (torch.zeros(2, dtype=torch.float64), None))
    _, up = algo.client_update(lsq_sized, {"x": x0}, None, info, result)
    assert torch.equal(algo.server_update(algo.init_server(lsq_sized, x0), info, up).x, x0)


def test_fedmgda_at_a_diverging_learning_rate_is_recorded_as_diverged(lsq_sized):
    """Non-finite uploads (a diverging local lr) used to reach SLSQP and numpy's SVD (LinAlgError)."""
    result = fc.run(lsq_sized, fc.make("fedmgda+"), rounds=30, lr=1e40, clients_per_round=None,
                    local=fc.LocalWork(steps=20, batch_size=None), per_client_metrics=False)
    assert result.status == "diverged"


def test_fedmgda_server_step_with_non_finite_uploads_gives_a_non_finite_model():
    task = fc.tasks.least_squares_task(num_clients=2, dim=2, seed=0)
    info = RoundInfo(0, torch.arange(2), torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.long), 0.1,
                     task.weights)
    algo = fc.make("fedmgda+")
    deltas = torch.tensor([[np.inf, 0.0], [1.0, 1.0]], dtype=torch.float64)
    new = algo.server_update(algo.init_server(task, torch.zeros(2, dtype=torch.float64)), info, {"delta": deltas})
    assert not torch.isfinite(new.x).all()


def test_squared_loss_refuses_column_targets():
    """Targets of shape (n, 1) used to broadcast the loss to (n, n) (0.759 instead of 0.673)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 1))
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3, 1, bias=False))
    with pytest.raises(fc.ConfigError, match=r"squared needs one target per row, shape \[n\]; got \(6, 1\)"):
        fc.tasks.from_client_arrays("column", [(x, y)], net, "squared")
    fc.tasks.from_client_arrays("flat", [(x, y[:, 0])], net, "squared")  # the same data as a vector: accepted


def test_non_finite_features_are_refused_at_task_building():
    x = np.ones((4, 2))
    x[1, 1] = np.nan
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 1))
    with pytest.raises(fc.ConfigError, match="client 0 features contain NaN or inf"):
        fc.tasks.from_client_arrays("nan", [(x, np.array([0.0, 1.0, 0.0, 1.0]))], net, "logistic")


def test_labels_beyond_the_models_outputs_are_refused_at_task_building():
    """A label >= the model's output count used to pass task building and raise IndexError mid-run."""
    x = np.random.default_rng(0).normal(size=(5, 2))
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 3))
    with pytest.raises(fc.ConfigError, match="labels up to 4 but the model has 3 outputs"):
        fc.tasks.from_client_arrays("labels", [(x, np.array([0, 1, 2, 4, 1]))], net, "cross_entropy")


def test_report_with_no_summaries_refuses_and_writes_nothing(tmp_path, capsys):
    from fedcompanion import cli
    readme, report = tmp_path / "README.md", tmp_path / "REPRODUCTION.md"
    readme.write_text("intro\n<!-- claims:start -->\nold table\n<!-- claims:end -->\n")
    report.write_text("old report\n")
    code = cli.main(["report", "--results", str(tmp_path / "EMPTY"), "--output", str(report),
                     "--readme", str(readme)])
    assert code == 2 and "no notebook summaries" in capsys.readouterr().err
    assert report.read_text() == "old report\n" and "old table" in readme.read_text()


def test_an_edited_status_is_not_served(tmp_path):
    """A run's JSON status (which decides whether a figure averages it) is covered by the record's digest."""
    import json

    from fedcompanion.experiments import ExperimentConfig, is_cached, sweep

    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=3), rounds=2,
                              clients_per_round=2, per_client_metrics=False)
    sweep([config], tmp_path, jobs=1, progress=False)
    path = tmp_path / f"{config.hash()}.json"
    meta = json.loads(path.read_text())
    meta["status"] = "diverged"
    path.write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="does not match its record digest"):
        assert not is_cached(config, tmp_path)


WORKER_SCRIPT = """
import sys
from fedcompanion.experiments import ExperimentConfig, sweep
configs = [ExperimentConfig(task="least_squares", task_args=dict(num_clients=8, dim=50), rounds=10**6,
                            clients_per_round=2, seed=s, per_client_metrics=False, eval_every=10**5)
           for s in range(2)]
sweep(configs, sys.argv[1], jobs=2, progress=False)
"""


def _children(pid: int) -> set[int]:
    from pathlib import Path

    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("computing", [True, False], ids=["while-computing", "while-starting"])
def test_a_killed_sweep_leaves_no_worker_behind(tmp_path, computing):
    """kill -9 of a sweep's process used to leave its workers (and the resource tracker) running for minutes."""
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT, str(tmp_path)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while len(_children(parent.pid)) < 3 and time.time() < deadline:  # two workers and the resource tracker
            time.sleep(0.2)
        workers = _children(parent.pid)
        assert len(workers) >= 2, "the sweep never started its workers"
        if computing:
            time.sleep(8)  # the workers import the package and start computing
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 20
        while any(_alive(p) for p in workers) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in workers), "workers outlived their killed parent"
    finally:
        parent.kill()


def test_torn_temporary_files_are_cleaned_when_a_sweep_starts(tmp_path):
    import os
    import time

    from fedcompanion.experiments import ExperimentConfig, sweep

    torn, fresh = tmp_path / ".abc.json.x1.tmp", tmp_path / ".def.json.x2.tmp"
    torn.write_text("half")
    fresh.write_text("being written by another process")
    old = time.time() - 3600
    os.utime(torn, (old, old))
    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=3), rounds=1,
                              clients_per_round=2, per_client_metrics=False)
    with pytest.warns(UserWarning, match="left by an interrupted write"):
        sweep([config], tmp_path, jobs=1, progress=False)
    assert not torn.exists() and fresh.exists()


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, capsys):
    """A 1 KB sweep file whose label is a YAML alias bomb used to exhaust memory; as rounds, to die building the
    error message."""
    from fedcompanion import cli
    nested = "[&a [x, x, x, x, x, x, x, x, x], " + ", ".join(
        f"&{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi")) + "]"  # 9^9 leaves
    for field in ("label", "rounds"):
        path = tmp_path / f"{field}.yaml"
        path.write_text(f"task: least_squares\n{field}: {nested}\n")
        assert cli.main(["run", str(path), "--results", str(tmp_path / "r")]) == 2
        assert "YAML alias" in capsys.readouterr().err


def test_a_label_that_is_not_text_is_refused():
    from fedcompanion.experiments import ExperimentConfig

    with pytest.raises(fc.ConfigError, match="label must be a str"):
        ExperimentConfig(label=["x"] * 3).validate()


def test_error_messages_cut_a_huge_value():
    with pytest.raises(fc.ConfigError) as error:
        fc.make("fedavg", server_lr=[[list(range(1000))] * 1000])
    assert len(str(error.value)) < 300


@pytest.mark.parametrize("inner", ["adafedadam", "qfedavg"])
def test_two_block_refuses_an_inner_algorithm_that_probes(inner):
    """With adafedadam it failed in round 0; with qfedavg it reported ok while the centroids never moved."""
    with pytest.raises(fc.ConfigError, match=f"inner algorithm cannot be '{inner}'"):
        fc.make("two_block", inner=inner)


class _TupleOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x), x


def _frozen():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    net[0].weight.requires_grad_(False)
    return net


def _integer():
    net = torch.nn.Linear(3, 2)
    net.extra = torch.nn.Parameter(torch.zeros(2, dtype=torch.long), requires_grad=False)
    return net


@pytest.mark.parametrize("model, message", [
    (lambda: torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 2)),
     r"layer '1' \(Dropout, p=0.5\) is random"),
    (lambda: torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)),
     r"layer '1' \(BatchNorm1d\) normalises by batch statistics"),
    (_frozen, r"parameter '0.weight' is frozen"),
    (_integer, r"parameter 'extra' is torch.int64"),
    (lambda: torch.nn.Flatten(), "the model has no parameters"),
    (_TupleOut, "the model returns tuple; it must return one tensor"),
])
def test_models_the_engines_cannot_run_purely_are_refused_at_task_building(model, message):
    """Issue 28 cause 7 and its weak cases: a Dropout model gave two histories for one seed and kept dropping in
    evaluation; BatchNorm, frozen or integer parameters, no parameters and tuple outputs crashed deep in torch."""
    rng = np.random.default_rng(0)
    clients = [(rng.standard_normal((5, 3)).astype(np.float32), rng.integers(0, 2, 5)) for _ in range(2)]
    with pytest.raises(fc.ConfigError, match=message):
        fc.tasks.from_client_arrays("user", clients, model(), "cross_entropy")


def test_dropout_at_zero_and_layer_normalisation_are_accepted():
    rng = np.random.default_rng(0)
    clients = [(rng.standard_normal((5, 3)).astype(np.float32), rng.integers(0, 2, 5)) for _ in range(2)]
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.0),
                              torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    task = fc.tasks.from_client_arrays("user", clients, net, "cross_entropy")
    a = fc.run(task, fc.make("fedavg"), 2, None, 0, lr=0.1)
    b = fc.run(task, fc.make("fedavg"), 2, None, 0, lr=0.1)
    assert a.history.equals(b.history)


def test_a_partial_run_is_never_stored_as_its_configs_run(tmp_path, lsq_sized):
    """Issue 28 cause 10: a Flower run that lost a client was cached under its config's key as a full, ok run."""
    from fedcompanion.experiments import ExperimentConfig, is_cached, store

    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=4), algorithm="fedavg",
                              rounds=1, lr=0.1, local=dict(steps=1, batch_size=None))
    result = fc.run(lsq_sized, fc.make("fedavg"), 1, None, 0, lr=0.1)
    result.status = "partial"
    with pytest.raises(ValueError, match="status 'partial' is not what its config describes"):
        store(config, result, tmp_path)
    assert not is_cached(config, tmp_path) and not list(tmp_path.glob("*"))


class _Noisy(torch.nn.Module):
    def __init__(self, noise):
        super().__init__()
        self.lin, self.noise = torch.nn.Linear(3, 2), noise
        with torch.no_grad():  # outputs below 0: RReLU draws its slope only there; with weights from the global
            self.lin.bias.fill_(-10.0)  # generator every probe output could be positive (it happened in a CI run)

    def forward(self, x):
        return self.noise(self.lin(x))


class _Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.out = torch.nn.MultiheadAttention(3, 1, dropout=0.5), torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.out(self.attn(x, x, x)[0])


class _Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru, self.out = torch.nn.GRU(3, 4, num_layers=2, dropout=0.5), torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.gru(x)[0])


class _Scalar(torch.nn.Module):
    def __init__(self, dtype=None):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.scale = torch.nn.Parameter(torch.ones((), dtype=dtype) if dtype else torch.ones(()))

    def forward(self, x):
        return self.lin(x) * self.scale.real if self.scale.is_complex() else self.lin(x) * self.scale


class _Complex(_Scalar):
    def __init__(self):
        torch.nn.Module.__init__(self)
        self.lin = torch.nn.Linear(3, 2)
        self.scale = torch.nn.Parameter(torch.ones(1, dtype=torch.complex64))


@pytest.mark.parametrize("model, message", [
    (lambda: _Noisy(torch.nn.RReLU()), "draws from torch's global generator"),
    (lambda: _Noisy(lambda a: torch.nn.functional.dropout(a, 0.5, training=True)), "global generator"),
    (lambda: _Noisy(lambda a: a + 0.1 * torch.randn_like(a)), "global generator"),
    (_Attention, "global generator"),
    (_Recurrent, "global generator"),
    (_Counting, r"changes its buffer\(s\) \['calls'\]"),
    (_Scalar, r"parameter 'scale' is 0-d"),
    (_Complex, r"parameter 'scale' is torch.complex64"),
])
def test_a_model_that_does_not_repeat_is_refused_by_the_determinism_contract(model, message):
    """Issue 47 group 2: each of these models was accepted, and the same config and seed gave two histories (or
    crashed in Task.unflatten, or dropped an imaginary part); the contract refuses each by name."""
    rng = np.random.default_rng(0)
    clients = [(rng.standard_normal((5, 3)).astype(np.float32), rng.integers(0, 2, 5)) for _ in range(2)]
    with pytest.raises(fc.ConfigError, match=message):
        fc.tasks.from_client_arrays("user", clients, model(), "cross_entropy")


def test_the_determinism_contract_leaves_the_model_and_the_generator_alone():
    from fedcompanion.models import check_repeatable

    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).eval()
    before = [p.detach().clone() for p in net.parameters()]
    state = torch.random.get_rng_state()
    check_repeatable(net, torch.ones(2, 3), "net")
    assert torch.equal(state, torch.random.get_rng_state()) and not net.training
    assert all(torch.equal(a, p) and p.grad is None for a, p in zip(before, net.parameters()))


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "kill -9"])
def test_a_reproduction_that_dies_takes_its_pool_kernel_and_tracker_with_it(stop):
    """Issue 47 group 5: kill -9 or SIGTERM of `python -m fedcompanion.reproduction.reproduce` left the kernel and the
    pool's resource tracker running 33 s later, and the kernel wrote its summary after the reproduction died."""
    import subprocess
    import sys
    import time

    from fedcompanion.infra.processes import descendants
    from fedcompanion.reproduction.reproduce import ROOT

    summary = ROOT / "build" / "smoke-results" / "summaries" / "fedvra--04_against_baselines.json"
    launcher = subprocess.Popen([sys.executable, "-m", "fedcompanion.reproduction.reproduce", "--profile", "smoke",
                                 "--only", "fedvra/04"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120

    def kernel_started():
        for pid in descendants([launcher.pid]):
            try:
                if b"ipykernel" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                pass
        return False

    while not kernel_started():
        assert time.monotonic() < deadline and launcher.poll() is None, "the kernel never started"
        time.sleep(0.2)
    time.sleep(3)  # the kernel is computing the notebook
    tree = descendants([launcher.pid]) - {launcher.pid}
    assert len(tree) >= 3  # the watchdog, the pool's worker and tracker, the kernel
    launcher.send_signal(stop)
    launcher.wait(timeout=30)
    killed = time.time()

    def alive():
        out = []
        for pid in tree:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(pid)
            except OSError:
                pass
        return out

    deadline = time.monotonic() + 10
    while alive():
        assert time.monotonic() < deadline, f"still running 10 s after the launcher died: {alive()}"
        time.sleep(0.2)
    time.sleep(2)
    assert not summary.exists() or summary.stat().st_mtime < killed


def test_a_killed_reproductions_kernel_sockets_are_removed_at_the_next_start(tmp_path):
    """A kernel killed with its reproduction (kill -9, the watchdog) cannot remove its IPC socket files; the next
    reproduction removes those whose launcher is gone and keeps a live launcher's (this process's) and any it cannot
    attribute."""
    import os
    import subprocess
    import sys

    from fedcompanion.infra.processes import KERNEL_SOCKETS, kernel_sockets, remove_stale_kernel_sockets

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{KERNEL_SOCKETS}{gone.pid}-0123456789ab-1"
    old = tmp_path / f"{KERNEL_SOCKETS}0123456789ab-2"  # the name before it carried a pid: maybe a live kernel's
    live = Path(f"{kernel_sockets(tmp_path)}-3")
    for path in (dead, old, live):
        path.touch()
    assert live.name.startswith(f"{KERNEL_SOCKETS}{os.getpid()}-")
    assert remove_stale_kernel_sockets(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, old.name])
