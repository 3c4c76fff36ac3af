"""Pruning: a stored run that no notebook's summary lists as read is an orphan; a summary that does not record what
it read stops the pruning."""
import json

import pytest

from fedcompanion.claims import Claim, record
from fedcompanion.experiments import ExperimentConfig, sweep
from fedcompanion.prune import delete, main, orphans
from fedcompanion.verdict import identity


def _config(lr):
    return ExperimentConfig(task="least_squares", task_args=dict(num_clients=3, dim=2), algorithm="fedavg",
                            rounds=2, clients_per_round=None, lr=lr, local=dict(steps=1, batch_size=None))


def _claim():
    return Claim("x.y", "FedVRA", "a claim", [], [identity("s", "q", 0.0, 1e-12)])


def test_a_run_no_notebook_read_is_an_orphan_and_only_it_is_deleted(tmp_path):
    sweep([_config(0.1), _config(0.2)], tmp_path, jobs=1, progress=False)  # a notebook's old grid: both
    record("nb", "old", [_claim()], tmp_path, "paper")  # forget what that read (as a new kernel would)
    sweep([_config(0.1)], tmp_path, jobs=1, progress=False)  # the notebook now reads only one of them
    summary = record("nb", "a notebook", [_claim()], tmp_path, "paper").summary
    assert summary.runs_read == [_config(0.1).hash()]
    assert orphans(tmp_path) == [_config(0.2).hash()]
    assert delete(tmp_path, orphans(tmp_path)) == 2  # its record and its history
    assert orphans(tmp_path) == [] and (tmp_path / f"{_config(0.1).hash()}.json").exists()


def test_a_summary_without_its_read_runs_stops_the_pruning(tmp_path, capsys):
    sweep([_config(0.1)], tmp_path, jobs=1, progress=False)
    path = record("nb", "a notebook", [_claim()], tmp_path, "paper").path
    data = json.loads(path.read_text())
    del data["runs_read"]  # written before summaries listed their runs
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"\['nb'\] do not list the runs they read"):
        orphans(tmp_path)
    assert main(["--results", str(tmp_path), "--delete"]) == 2
    assert (tmp_path / f"{_config(0.1).hash()}.json").exists()
    assert "execute those notebooks again" in capsys.readouterr().err
