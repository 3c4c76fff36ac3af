"""The fourth reliability pass's causes that belong to no maintenance command: a library's place on disk is not the
user's code (#6), API inputs that crashed deep in a library (#7), a "deterministic" item with several values (#8),
claim text and ids that broke the report (#9), and a plug-in changed in the running process (#10)."""
import dataclasses
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import fedcompanion as fc
from fedcompanion.data.loaders import LOADERS
from fedcompanion.experiments import ExperimentConfig, sweep
from fedcompanion.infra import fingerprint as fp
from fedcompanion.infra.atomic import DamagedFile
from fedcompanion.reproduction.claims.record import Claim, load_summaries, record
from fedcompanion.reproduction.report import render
from fedcompanion.reproduction.rule.item import against, identity


# ---------------------------------------------------------------- 6: where a library is installed is not the user's
def test_a_distributions_module_on_pythonpath_is_no_users_code(tmp_path, monkeypatch):
    """`pip install --target`, a distribution's dist-packages, --user outside a venv: a library beside its
    dist-info is the library's, wherever it lies (it was hashed as the user's: every key changed)."""
    (tmp_path / "vendored_lib").mkdir()
    (tmp_path / "vendored_lib" / "__init__.py").write_text("VALUE = 1\n")
    info = tmp_path / "vendored_lib-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vendored-lib\nVersion: 1.0\n")
    (info / "RECORD").write_text("vendored_lib/__init__.py,,\nvendored_lib-1.0.dist-info/METADATA,,\n")
    (info / "top_level.txt").write_text("vendored_lib\n")
    (tmp_path / "my_own_module.py").write_text("VALUE = 2\n")  # the user's: no distribution ships it
    monkeypatch.syspath_prepend(str(tmp_path))
    fp.clear()
    try:
        assert fp.user_file("vendored_lib") is None
        assert fp.user_file("my_own_module") == (tmp_path / "my_own_module.py").resolve()
    finally:
        fp.clear()


# ---------------------------------------------------------------------------------- 7: API inputs at the edges
def _arrays_task(requires_grad: bool):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g, requires_grad=requires_grad) * 1.0
    y = (x.detach()[:, 0] > 0).long()
    return fc.tasks.from_client_arrays("grad", [(x[:20], y[:20]), (x[20:], y[20:])], torch.nn.Linear(3, 2),
                                       "cross_entropy")


def test_features_that_require_grad_are_data():
    task = _arrays_task(True)
    assert not task.x_all.requires_grad
    run = fc.run(task, fc.make("fedavg"), 2, clients_per_round=None, engine="batched")  # failed in index_select
    plain = fc.run(_arrays_task(False), fc.make("fedavg"), 2, clients_per_round=None, engine="batched")
    assert run.history.value.tolist() == plain.history.value.tolist()


def test_a_seed_beyond_64_bits_is_named():
    task = fc.tasks.least_squares_task(num_clients=3, dim=2, seed=0)
    with pytest.raises(fc.ConfigError, match="seed must be"):
        fc.run(task, fc.make("fedavg"), 1, seed=2**64)  # "Overflow when unpacking long long"
    with pytest.raises(fc.ConfigError, match="seed must be"):
        ExperimentConfig(task="least_squares", seed=2**64).validate()


# --------------------------------------------------------------------------- 8: one exact value, or it is seeds
def test_a_deterministic_item_holds_exactly_one_value():
    assert against("s", "q", "m", "lower", [1.0], 2.0, deterministic=True).word() == "reproduces"
    with pytest.raises(ValueError, match="deterministic evidence .* one exact value"):
        against("s", "q", "m", "lower", [1.0, 3.0], 2.0, deterministic=True)  # judged on the first before


# ------------------------------------------------------------------------ 9: claim text and ids a report can hold
def _claim(cid, text="a claim"):
    return Claim(cid, "FedVRA", text, [], [identity("s", "q", 0.0, 1e-12)])


def test_two_claims_with_one_id_are_refused(tmp_path):
    with pytest.raises(DamagedFile, match="two claims have the id 'x.y'"):
        record("nb", "t", [_claim("x.y"), _claim("x.y")], tmp_path, "paper")
    record("a", "t", [_claim("x.y")], tmp_path, "paper")
    record("b", "t", [_claim("x.y")], tmp_path, "paper")
    with pytest.raises(DamagedFile, match=r"'x.y' \(notebooks 'a' and 'b'\)"):
        load_summaries(tmp_path)


def test_claim_text_cannot_break_the_index_or_put_markup_on_a_page(tmp_path):
    hostile = "bars | and\nnewlines, <script>alert(1)</script> and [a link](javascript:alert(1))"
    record("nb", "t", [_claim("x.y", hostile)], tmp_path, "paper")
    text = render(tmp_path)
    index = [line for line in text.splitlines() if "(#x-y)" in line]
    assert len(index) == 1 and len(re.findall(r"(?<!\\)\|", index[0])) == 5  # one row of four cells
    assert "<script>" not in text and "](javascript:" not in text


# -------------------------------------------------------------- 10: a plug-in changed in the running process
def test_a_user_modules_constant_reassigned_in_the_process_changes_the_key(tmp_path, monkeypatch):
    """`mymodule.SCALE = 0.5` in a notebook: the run reads 0.5, so it is another run (it was served 1.0's)."""
    (tmp_path / "scaled_engine_mod.py").write_text(textwrap.dedent("""
        SCALE = 1.0


        def loader():
            import torch

            from fedcompanion.data.loaders import ArrayDataset

            g = torch.Generator().manual_seed(0)
            x = torch.randn(40, 3, generator=g) * SCALE
            return ArrayDataset(x[:30], (x[:30, 0] > 0).long(), 2), ArrayDataset(x[30:], (x[30:, 0] > 0).long(), 2)


        class Scaled:
            def scale(self, x):
                return SCALE * x
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import scaled_engine_mod as mod

    try:
        first = fp.fingerprint([mod.Scaled])
        mod.SCALE = 0.5
        assert fp.fingerprint([mod.Scaled]) != first
        mod.SCALE = 1.0
        assert fp.fingerprint([mod.Scaled]) == first
        fc.register_dataset("scaled-toy", mod.loader)  # a loader whose data change in the process
        config = ExperimentConfig(task="dataset", task_args={"dataset": "scaled-toy", "num_clients": 2,
                                                             "model": "logistic"}, rounds=1, clients_per_round=2)
        one = sweep([config], tmp_path / "results", jobs=1, progress=False)
        key = config.hash()
        mod.SCALE = 0.5
        assert config.hash() != key  # the key reads the data as they are now (it kept the old digest)
        two = sweep([config], tmp_path / "results", jobs=1, progress=False)
        assert one.value.tolist() != two.value.tolist()
    finally:
        mod.SCALE = 1.0
        LOADERS.pop("scaled-toy", None)
        sys.modules.pop("scaled_engine_mod", None)
        fp.clear()


def test_a_summary_keeps_json_numbers(tmp_path):
    """Summaries are JSON: no NaN token (a reader in another language refuses it)."""
    item = against("s", "q", "m", "lower", [float("nan")], 2.0, deterministic=True)
    path = record("nb", "t", [Claim("x.z", "FedVRA", "c", [], [item])], tmp_path, "paper").path
    json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in a summary"))
    value = load_summaries(tmp_path)[0].claims[0].evidence[0].values[0]
    assert value != value  # NaN, read back


# ------------------------------------------------------------------------------------------ weak cases answered
def test_a_fully_cached_sweep_reads_a_read_only_folder(tmp_path, monkeypatch):
    """A shared, read-only results folder serves its runs (the sweep refused it though it writes nothing)."""
    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=3, dim=2), rounds=2,
                              clients_per_round=None)
    first = sweep([config], tmp_path, jobs=1, progress=False)

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(importlib.import_module("fedcompanion.experiments.sweep").tempfile, "TemporaryFile",
                        read_only)
    assert sweep([config], tmp_path, jobs=1, progress=False).value.tolist() == first.value.tolist()
    with pytest.raises(fc.ConfigError, match="is not writable"):  # a run to compute: refused before computing
        sweep([dataclasses.replace(config, seed=1)], tmp_path, jobs=1, progress=False)


@pytest.mark.slow
def test_sigterm_of_verify_leaves_no_temporary_folder(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-m", "fedcompanion.reproduction.verify", "--subset", "smoke"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not any(tmp_path.iterdir()) and process.poll() is None:
        assert time.monotonic() < deadline, "verify made no temporary folder"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) != 0
    assert not any(p.name.startswith("tmp") for p in tmp_path.iterdir())
