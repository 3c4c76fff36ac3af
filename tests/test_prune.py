"""Pruning: a stored run that no notebook's summary lists as read is an orphan; a summary that does not record what
it read stops the pruning."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedcompanion.experiments import ExperimentConfig, sweep
from fedcompanion.experiments.cache import take_read_runs
from fedcompanion.reproduction.claims.record import Claim, record
from fedcompanion.reproduction.prune import delete, main, orphans
from fedcompanion.reproduction.rule.item import identity


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
    assert orphans(tmp_path, min_age_hours=0) == [_config(0.2).hash()]
    assert delete(tmp_path, orphans(tmp_path, 0)) == 2  # its record and its history
    assert orphans(tmp_path, 0) == [] and (tmp_path / f"{_config(0.1).hash()}.json").exists()


def test_a_summary_without_its_read_runs_stops_the_pruning(tmp_path, capsys):
    sweep([_config(0.1)], tmp_path, jobs=1, progress=False)
    path = record("nb", "a notebook", [_claim()], tmp_path, "paper").path
    data = json.loads(path.read_text())
    del data["runs_read"]  # written before summaries listed their runs
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"\['nb'\] do not list the runs they read"):
        orphans(tmp_path, 0)
    assert main(["--results", str(tmp_path), "--delete"]) == 2
    assert (tmp_path / f"{_config(0.1).hash()}.json").exists()
    assert "execute those notebooks again" in capsys.readouterr().err


def test_runs_a_summary_lists_from_another_folder_are_named_by_notebook_and_kept(tmp_path, capsys):
    """91_your_own_problem reads its runs from build/your-own-results and records its summary in results/: the
    warning names the notebook and that folder (it once said only "another results folder?"), and nothing of it is
    pruned. Wrong: a warning naming no notebook, or a prune that counts those runs as orphans."""
    elsewhere = tmp_path / "elsewhere"
    sweep([_config(0.3)], elsewhere, jobs=1, progress=False)
    sweep([_config(0.1)], tmp_path, jobs=1, progress=False)
    record("91_your_own_problem", "Your own problem", [_claim()], tmp_path, "paper")
    assert main(["--results", str(tmp_path), "--delete", "--min-age", "0"]) == 0
    err = capsys.readouterr().err
    assert "list 1 runs that are not stored in" in err, err
    assert "91_your_own_problem: 1, stored in build/your-own-results" in err, err
    assert (tmp_path / f"{_config(0.1).hash()}.json").exists()


# ------------------------------------------------------------------------------ what prune cannot know (fourth pass)
def test_without_summaries_prune_deletes_nothing(tmp_path, capsys):
    """A `fedcompanion run` folder, a copy without summaries/, an empty summaries/: every run would look like an
    orphan (the old prune deleted them all and exited 0)."""
    sweep([_config(0.1)], tmp_path, jobs=1, progress=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["--results", str(tmp_path), "--delete", "--min-age", "0"]) == 2
    (tmp_path / "summaries").mkdir()
    assert main(["--results", str(tmp_path), "--delete", "--min-age", "0"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["summaries"])
    assert "has no notebook summary" in capsys.readouterr().err
    assert main(["--results", str(tmp_path / "typo"), "--delete"]) == 2  # a mistyped folder is no "0 of 0"


def test_a_run_stored_by_a_notebook_still_running_is_kept(tmp_path):
    """A notebook stores its runs, then writes its summary at its end: a prune in between must not delete them."""
    take_read_runs()  # (what earlier tests read)
    record("other", "another notebook", [_claim()], tmp_path, "paper")
    sweep([_config(0.1)], tmp_path, jobs=1, progress=False)  # the running notebook's run, listed by no summary yet
    assert main(["--results", str(tmp_path), "--delete"]) == 0
    assert (tmp_path / f"{_config(0.1).hash()}.json").exists() and orphans(tmp_path) == []
    assert orphans(tmp_path, min_age_hours=0) == [_config(0.1).hash()]  # once it is old enough, an orphan


def test_only_a_runs_own_files_are_deleted(tmp_path):
    sweep([_config(0.1)], tmp_path, jobs=1, progress=False)
    record("nb", "a notebook", [_claim()], tmp_path, "paper")
    (tmp_path / "notes.json").write_text("{}")  # a user's file: no run's name
    (tmp_path / "ABCDEF0123456789.json").write_text("{}")  # upper case: no run's name either
    os.mkfifo(tmp_path / "0123456789abcdef.json")  # a FIFO named like a run: never opened, never deleted
    assert orphans(tmp_path, 0) == []
    assert main(["--results", str(tmp_path), "--delete", "--min-age", "0"]) == 0
    assert {"notes.json", "ABCDEF0123456789.json", "0123456789abcdef.json"} <= {p.name for p in tmp_path.iterdir()}


def test_a_malformed_or_blocking_summary_stops_pruning(tmp_path, capsys):
    sweep([_config(0.1)], tmp_path, jobs=1, progress=False)
    path = record("nb", "a notebook", [_claim()], tmp_path, "paper").path
    data = json.loads(path.read_text())
    for bad in ([1, 2], ["ABCDEF0123456789"]):  # a TypeError once; unknown-case hashes passed silently
        data["runs_read"] = bad
        path.write_text(json.dumps(data))
        assert main(["--results", str(tmp_path), "--delete", "--min-age", "0"]) == 2
        assert "runs_read should list runs' hashes" in capsys.readouterr().err
    path.unlink()
    os.mkfifo(path)  # a FIFO planted among the summaries: refused, not read (reading it would hang)
    assert main(["--results", str(tmp_path), "--min-age", "0"]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert (tmp_path / f"{_config(0.1).hash()}.json").exists()


def _fake_results(folder, runs: int, listed: int):
    """A results folder of ``runs`` runs' files (record and history) with one summary listing the first ``listed``;
    returns the files present."""
    folder.mkdir(parents=True, exist_ok=True)
    hashes = [f"{k:016x}" for k in range(runs)]
    for h in hashes:
        (folder / f"{h}.csv.gz").write_bytes(b"history")
        (folder / f"{h}.json").write_text("{}")
    old = time.time() - 86400
    for p in folder.iterdir():
        os.utime(p, (old, old))
    record("nb", "a notebook", [_claim()], folder, "paper")
    path = folder / "summaries" / "nb.json"
    data = json.loads(path.read_text())
    data["runs_read"] = hashes[:listed]
    path.write_text(json.dumps(data))
    return {p.name for p in folder.iterdir()}


def assert_listed_runs_stored(results):
    """Every run a summary lists has its record and history (what a kill at any point must leave)."""
    for path in (results / "summaries").glob("*.json"):
        if not path.name.startswith("_"):
            for h in json.loads(path.read_text()).get("runs_read") or ():
                assert (results / f"{h}.json").is_file() and (results / f"{h}.csv.gz").is_file(), (path, h)


class _Crash(BaseException):
    pass


class _CrashAt:
    """Counts file deletions and raises :class:`_Crash` at the ``k``-th (a kill -9 there, as far as files go)."""

    def __init__(self, k: int, real):
        self.k, self.count, self.real = k, 0, real

    def unlink(self, path, *args, **kwargs):
        if self.count == self.k:
            raise _Crash
        self.count += 1
        return self.real(path, *args, **kwargs)


def test_prune_interrupted_at_every_file_operation_loses_nothing_listed(tmp_path, monkeypatch):
    """kill -9 between any two deletions: what a summary lists is stored, nothing but orphans' files went, and the
    next prune removes the rest (a history left without its record included)."""
    real = Path.unlink
    for k in range(6):  # 3 orphans x 2 files
        folder = tmp_path / str(k)
        present = _fake_results(folder, 5, 2)
        crash = _CrashAt(k, real)
        monkeypatch.setattr(Path, "unlink", lambda path, *a, c=crash, **kw: c.unlink(path, *a, **kw))
        with pytest.raises(_Crash):
            main(["--results", str(folder), "--delete", "--min-age", "0"])
        monkeypatch.setattr(Path, "unlink", real)
        assert_listed_runs_stored(folder)
        orphan_files = {f"{h:016x}{s}" for h in range(2, 5) for s in (".json", ".csv.gz")}
        assert present - orphan_files <= {p.name for p in folder.iterdir()}
        assert main(["--results", str(folder), "--delete", "--min-age", "0"]) == 0
        assert {p.name for p in folder.iterdir()} == present - orphan_files


def test_prune_killed_at_random_points_loses_nothing_listed(tmp_path):
    for k, delay in enumerate(random.Random(0).uniform(0.3, 2.5) for _ in range(3)):
        folder = tmp_path / str(k)
        present = _fake_results(folder, 3000, 1000)
        process = subprocess.Popen([sys.executable, "-m", "fedcompanion.reproduction.prune", "--results", str(folder),
                                    "--delete", "--min-age", "0"], stdout=subprocess.DEVNULL)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert_listed_runs_stored(folder)
        kept = {f"{h:016x}{s}" for h in range(1000) for s in (".json", ".csv.gz")}
        assert kept | {"summaries"} <= {p.name for p in folder.iterdir()} <= present
