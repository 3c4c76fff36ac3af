"""The batched engine follows the loop engine's trajectory (same clients, same mini-batches).

Compared in float64, where the two agree to rounding; in float32 a ReLU pre-activation that sits
within rounding of zero can flip in one engine only (see fedcompanion.engine.batched).
"""
import dataclasses
import importlib
import subprocess
import sys

import pytest
import torch

import fedcompanion as fc

FAMILIES = [("fedavg", {}), ("fedadam", {"server_lr": 0.01}),
            ("fedprox", {"mu": 0.1}), ("fedvra", {"gamma": 0.3, "dual_stepsize": 0.7}),
            ("fedadmm", {"gamma": 0.3}), ("feddyn", {"alpha": 0.3}), ("scaffold", {"option": "II"}),
            ("scaffold", {"option": "I"})]


@pytest.fixture(scope="module")
def mnist64():
    return fc.tasks.federated_dataset_task("mnist", 30, "dirichlet", "mlp", seed=1, alpha=0.3, hidden=(16,),
                                           l2=1e-3, dtype=torch.float64)


@pytest.mark.parametrize("name,hp", FAMILIES, ids=[f"{n}-{h}" for n, h in FAMILIES])
def test_batched_matches_loop_on_mnist_mlp(mnist64, name, hp, mlp_path):
    _batched_matches_loop(mnist64, name, hp, mlp_path)


def test_batched_matches_loop_with_per_client_gamma(mnist64):
    """A step size or proximal weight that differs between clients takes the autograd path."""
    _batched_matches_loop(mnist64, "fedvra", {"gamma": [0.1 + 0.02 * i for i in range(30)]})


def _batched_matches_loop(mnist64, name, hp, engine="batched"):
    kw = dict(rounds=5, clients_per_round=6, seed=2, lr=0.05, local=fc.LocalWork(steps_range=(1, 6), batch_size=8),
              eval_every=5, per_client_metrics=False)
    loop = fc.run(mnist64, fc.make(name, **hp), engine="loop", **kw)
    batched = fc.run(mnist64, fc.make(name, **hp), engine=engine, **kw)
    assert float((loop.params - batched.params).norm() / loop.params.norm()) < 1e-10
    assert loop.metric("train_loss").iloc[-1] < loop.metric("train_loss").iloc[0]  # it did train


@pytest.mark.parametrize("anchors", ["shared", "per client"])
@pytest.mark.parametrize("rho", [0.0, 0.4])
def test_offsets_of_every_form_match_the_loop_engine(mnist64, mlp_path, anchors, rho):
    """c - rho z for each form of c (a [K, P] tensor, K rows, Negated rows, none) and of z (one for all, one per
    client): the batched engine's paths follow the loop engine, and a Negated c gives the numbers of the negated
    tensor."""
    from fedcompanion.engine import ENGINES, train_loop
    from fedcompanion.protocol import LocalObjective, Negated

    train_batched = ENGINES[mlp_path][0]
    clients, k = torch.tensor([2, 5, 11, 17]), 4
    gen = torch.Generator().manual_seed(0)
    x0 = mnist64.init_params(0)
    noise = torch.randn(k, mnist64.num_params, generator=gen, dtype=x0.dtype)
    anchor = x0.expand(k, -1) if anchors == "shared" else x0 + 0.1 * noise.flip(0)
    lam = 0.05 * noise
    steps = torch.tensor([3, 5, 2, 4])

    def train(engine, linear):
        objective = LocalObjective(x0.expand(k, -1), anchor, torch.full((k,), rho, dtype=x0.dtype), linear,
                                   torch.ones(k, dtype=x0.dtype), steps, torch.full((k,), 0.05, dtype=x0.dtype))
        return engine(mnist64, objective, clients, seed=1, round=0, batch_size=8)[0]

    loop, plain = train(train_loop, -lam), train(train_loop, None)
    for linear, reference in ((-lam, loop), (tuple(-lam), loop), (Negated(tuple(lam.unbind(0))), loop), (None, plain)):
        batched = train(train_batched, linear)
        assert float((reference - batched).norm() / (reference - x0).norm()) < 1e-10
    assert torch.equal(train(train_batched, -lam), train(train_batched, Negated(tuple(lam.unbind(0)))))
    assert torch.equal(train(train_loop, -lam), train(train_loop, Negated(tuple(lam.unbind(0)))))


def test_offset_subtracted_block_by_block_gives_the_same_numbers(mnist64, monkeypatch):
    """Without momentum the batched engine subtracts the offset c - rho z a block of clients at a time: blocks of
    two clients in the first layer (784 x 16 float64 each) give bit for bit the numbers of one block of all six."""
    kw = dict(rounds=3, clients_per_round=6, seed=2, lr=0.05, local=fc.LocalWork(steps_range=(1, 6), batch_size=8),
              eval_every=3, per_client_metrics=False)
    products = importlib.import_module("fedcompanion.engine.products")
    whole = fc.run(mnist64, fc.make("fedvra", gamma=0.3), engine="batched-products", **kw)
    monkeypatch.setattr(products, "BLOCK_BYTES", 2 * 784 * 16 * 8)
    blocks = fc.run(mnist64, fc.make("fedvra", gamma=0.3), engine="batched-products", **kw)
    loop = fc.run(mnist64, fc.make("fedvra", gamma=0.3), engine="loop", **kw)
    assert torch.equal(whole.params, blocks.params)
    assert float((loop.params - blocks.params).norm() / loop.params.norm()) < 1e-10


def test_batched_matches_loop_full_batch_unequal_sizes(lsq_sized, mlp_path):
    kw = dict(rounds=5, lr=0.05, local=fc.LocalWork(epochs=2.0, batch_size=None), per_client_metrics=False)
    loop = fc.run(lsq_sized, fc.make("fedvra", gamma=0.5), engine="loop", **kw)
    batched = fc.run(lsq_sized, fc.make("fedvra", gamma=0.5), engine=mlp_path, **kw)
    assert torch.allclose(loop.params, batched.params, rtol=0, atol=1e-13)


def test_batched_float32_agrees_closely_for_one_round(small_mnist, mlp_path):
    kw = dict(rounds=1, clients_per_round=5, per_client_metrics=False, local=fc.LocalWork(steps=5))
    x0 = small_mnist.init_params(0)
    loop = fc.run(small_mnist, fc.make("fedavg"), engine="loop", **kw)
    batched = fc.run(small_mnist, fc.make("fedavg"), engine=mlp_path, **kw)
    assert float((loop.params - batched.params).norm() / (loop.params - x0).norm()) < 1e-5


THREADS_SCRIPT = """
import sys, torch
torch.set_num_interop_threads(int(sys.argv[1]))
torch.set_num_threads(int(sys.argv[2]))
import fedcompanion as fc
task = fc.tasks.federated_dataset_task("mnist", 20, "dirichlet", "mlp", seed=0, alpha=0.5, hidden=(16,))
kw = dict(rounds=2, clients_per_round=7, seed=1, per_client_metrics=False, local=fc.LocalWork(epochs=1.0))
first = fc.run(task, fc.make("fedvra", gamma=0.3), **kw).params
again = fc.run(task, fc.make("fedvra", gamma=0.3), **kw).params
assert torch.equal(first, again)
torch.save(first, sys.argv[3])
"""


@pytest.mark.slow
def test_clientwise_numbers_do_not_depend_on_the_thread_counts(tmp_path):
    """Each client's steps run on one thread whichever it is: 1, 2 or 3 inter-op threads and 1 or 2 intra-op
    threads give the same bits (float32), and a second run in the same process repeats the first."""
    script = tmp_path / "threads.py"
    script.write_text(THREADS_SCRIPT)
    params = []
    for interop, intraop in [(1, 1), (2, 2), (3, 1)]:
        out = tmp_path / f"{interop}-{intraop}.pt"
        subprocess.run([sys.executable, str(script), str(interop), str(intraop), str(out)], check=True)
        params.append(torch.load(out))
    assert all(torch.equal(params[0], p) for p in params[1:])


@pytest.mark.parametrize("name, hp, local", [
    ("fedvra", dict(gamma=0.3), dict(momentum=0.9, weight_decay=1e-3)),
    ("fedprox", dict(mu=0.1), dict(weight_decay=1e-3)),
    ("scaffold", {}, {}),
])
def test_clientwise_steps_in_python_give_the_torchscript_numbers(monkeypatch, name, hp, local):
    """Where ``torch.jit.script`` fails, the clients' steps run as Python, with a warning, and give the same bits
    (float32) as the TorchScript that runs them otherwise."""
    from fedcompanion.engine import clientwise

    task = fc.tasks.federated_dataset_task("mnist", 20, "dirichlet", "mlp", seed=0, alpha=0.5, hidden=(16, 8))
    kw = dict(rounds=2, clients_per_round=5, seed=1, per_client_metrics=False, local=fc.LocalWork(epochs=0.5, **local))
    scripted = fc.run(task, fc.make(name, **hp), **kw).params
    assert clientwise._compiled not in (None, clientwise._all_clients)  # TorchScript's (the path's second run below)

    def cannot_script(function):
        raise RuntimeError("no TorchScript here")

    monkeypatch.setattr(clientwise, "_compiled", None)
    monkeypatch.setattr(torch.jit, "script", cannot_script)
    with pytest.warns(RuntimeWarning, match="torch.jit.script failed"):
        in_python = fc.run(task, fc.make(name, **hp), **kw).params
    assert clientwise._compiled is clientwise._all_clients
    assert torch.equal(scripted, in_python)


def test_every_client_row_starts_on_a_64_byte_boundary(small_mnist, monkeypatch):
    """The clients' rows of the [K, P] result are laid out as tensors of their own would be: with P = 12,730
    floats (784-16-10), rows of a contiguous [K, P] would start 40 bytes past a boundary for every odd k."""
    from fedcompanion.engine import clientwise

    starts = []

    def recording(*args):
        starts.extend(row.data_ptr() % clientwise.ROW_ALIGNMENT for row in args[2][4])
        clientwise._all_clients(*args)

    monkeypatch.setattr(clientwise, "_compiled", recording)
    fc.run(small_mnist, fc.make("fedavg"), rounds=1, clients_per_round=5, per_client_metrics=False,
           local=fc.LocalWork(steps=2, momentum=0.5))
    assert small_mnist.num_params * 4 % clientwise.ROW_ALIGNMENT != 0 and len(starts) == 5
    assert starts == [0] * 5
    rows = clientwise.aligned_rows(torch.zeros(1, dtype=torch.float64), 3, 5)
    assert rows.shape == (3, 5) and rows.stride() == (8, 1) and all(r.data_ptr() % 64 == 0 for r in rows)


@pytest.mark.parametrize("build, name, hp", [
    (lambda: fc.tasks.qsar_logistic_task(num_clients=6), "adafedadam", dict(alpha=1.0, server_lr=0.03)),
    (lambda: fc.tasks.federated_dataset_task("mnist", 12, "dirichlet", "mlp", seed=0, alpha=0.5, hidden=(16,)),
     "fedvra", dict(gamma=0.3)),
])
def test_full_batch_steps_read_the_rows_in_place_with_the_copys_bits(monkeypatch, build, name, hp):
    """A full-batch client's steps read its rows of the data in place (one aligned view, ``whole_block``) instead of
    copying them at every step, and end on the bits of the copy (QSAR float64; MNIST float32 with an MLP). Mini-batches
    and a run that does not start on a 64-byte boundary keep the copy."""
    from fedcompanion.engine import clientwise

    task = build()
    kw = dict(rounds=2, clients_per_round=4, seed=1, per_client_metrics=False,
              local=fc.LocalWork(steps=3, batch_size=None))
    used = []
    whole_block = clientwise.whole_block

    def recording(inputs, rows):
        block = whole_block(inputs, rows)
        used.append(block is not None)
        return block

    monkeypatch.setattr(clientwise, "whole_block", recording)
    in_place = fc.run(task, fc.make(name, **hp), **kw).params
    assert used and all(used)
    monkeypatch.setattr(clientwise, "whole_block", lambda inputs, rows: None)
    copied = fc.run(task, fc.make(name, **hp), **kw).params
    assert torch.equal(in_place, copied)
    monkeypatch.setattr(clientwise, "whole_block", recording)
    used.clear()
    fc.run(task, fc.make(name, **hp), **dict(kw, local=fc.LocalWork(steps=3, batch_size=8)))
    assert used and not any(used)
    data = torch.zeros(10, 3, dtype=torch.float64)  # rows of 24 bytes: row 1 starts 24 bytes past a boundary
    assert whole_block(data, torch.arange(1, 4).expand(2, 3)) is None
    assert whole_block(data, torch.arange(8, 10).expand(2, 2)) is not None  # 192 bytes in
    assert whole_block(data, torch.tensor([[8, 9], [9, 8]])) is None


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_clients_numbers_do_not_depend_on_the_other_clients_of_its_round(small_mnist, momentum):
    """Each client of a round of five, trained again alone (a Flower client's K = 1), ends on the same bits in
    float32, whatever its place in the round. On an AMD Zen 4/5 CPU, before the clients' rows were aligned, the
    clients at odd places ended ~1e-7 away (MKL's matrix-vector product depends on its output's alignment there)."""
    from fedcompanion.driver import client_work, initial_state

    algorithm, local = fc.make("fedvra", gamma=0.3), fc.LocalWork(epochs=1.0, momentum=momentum)
    state = initial_state(small_mnist, algorithm, small_mnist.init_params(0), local)
    clients = torch.tensor([0, 3, 7, 11, 16])
    info = fc.protocol.RoundInfo(0, clients, torch.full((20,), 0.25), torch.tensor([9, 7, 8, 6, 5]), 0.05,
                                 small_mnist.weights.to(small_mnist.dtype))
    received = algorithm.broadcast(state)
    _, _, together = client_work(small_mnist, algorithm, received, state.active(clients), info, local=local)
    for k, i in enumerate(clients.tolist()):
        one = dataclasses.replace(info, clients=clients[k : k + 1], steps=info.steps[k : k + 1])
        _, _, alone = client_work(small_mnist, algorithm, received, state.active(one.clients), one, local=local)
        assert torch.equal(alone.x[0], together.x[k]), f"client {i} at place {k}"


def test_clients_are_dealt_to_the_thread_with_the_least_work():
    from fedcompanion.engine.clientwise import chains

    assert chains([5, 4, 3, 3, 1], 2) == [[0, 3], [1, 2, 4]]
    assert chains([2], 4) == [[0]] and chains([3, 1], 1) == [[0, 1]]


@pytest.mark.parametrize("samples", [None, 40])
def test_loss_only_probe_gives_the_same_losses_bit_for_bit(small_mnist, samples):
    """q-FedAvg's probe skips the gradients: a forward pass gives exactly the losses the autograd pass gives."""
    noise = torch.randn(small_mnist.num_params, generator=torch.Generator().manual_seed(3))
    x = small_mnist.init_params(0) + 0.01 * noise
    clients = torch.tensor([3, 0, 7])
    losses, grads = fc.engine.probe_loop(small_mnist, x, clients, samples, seed=1, round=2)
    alone, none = fc.engine.probe_loop(small_mnist, x, clients, samples, seed=1, round=2, gradient=False)
    assert torch.equal(losses, alone) and none is None and grads.shape == (3, small_mnist.num_params)
    assert fc.make("qfedavg").probe_gradient is False and fc.make("adafedadam").probe_gradient is True


def test_kernels_are_chosen_by_argument(mnist64):
    """``"batched"`` on a CPU is the clientwise kernel, bit for bit; a kernel that cannot run the objective (one
    proximal weight per client) is refused by name, and ``"autograd"`` runs it."""
    from fedcompanion.engine import train_batched

    kw = dict(rounds=2, clients_per_round=4, seed=3, lr=0.05, local=fc.LocalWork(steps=3, batch_size=8),
              eval_every=2, per_client_metrics=False)
    auto = fc.run(mnist64, fc.make("fedavg"), engine="batched", **kw)
    clientwise = fc.run(mnist64, fc.make("fedavg"), engine="batched-clientwise", **kw)
    assert torch.equal(auto.params, clientwise.params)
    per_client = fc.make("fedvra", gamma=[0.1 + 0.01 * i for i in range(30)])
    with pytest.raises(fc.ConfigError, match="'products' kernel needs"):
        fc.run(mnist64, per_client, engine="batched-products", **kw)
    with pytest.raises(fc.ConfigError, match="kernel"):
        train_batched(mnist64, None, [0], seed=0, round=0, batch_size=8, kernel="fused")
