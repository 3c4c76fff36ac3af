"""rekey carries committed runs across a code change only where their numbers stay as they were: a number-neutral
edit (a local name) carries every run under its new key; an edit that moves the numbers (FedAvg's server step
halved) carries none and leaves the old files as they were."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedcompanion.experiments import ExperimentConfig, sweep
from fedcompanion.experiments.cache import record_digest
from fedcompanion.infra.fingerprint import ROOT as PACKAGE
from fedcompanion.reproduction import rekey as rekey_module
from fedcompanion.reproduction.verify import _stored, is_current

CONFIGS = [ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=3), algorithm="fedavg", rounds=3,
                            clients_per_round=2, local=dict(steps=2, batch_size=None), seed=s) for s in (0, 1)]
LINE = '        return -weighted_mean_of_updates(info, uploads["delta"], self.aggregation)\n'
EDITS = {
    "a local name": '        mean = weighted_mean_of_updates(info, uploads["delta"], self.aggregation)\n'
                    '        return -mean\n',
    "the step halved": '        return -0.5 * weighted_mean_of_updates(info, uploads["delta"], self.aggregation)\n',
}


def _python(src: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(src)},
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("edit", list(EDITS))
def test_rekey_carries_a_number_neutral_edit_and_refuses_one_that_moves_the_numbers(tmp_path, edit):
    results = tmp_path / "results"
    sweep(CONFIGS, results, jobs=1, progress=False)  # stored by this code: the one before the edit
    stored = sorted(p.name for p in results.iterdir())
    summary = results / "summaries" / "nb.json"  # a notebook that read both runs and one run of another code
    summary.parent.mkdir()
    listed = sorted([p.stem for p in results.glob("*.json")] + ["ffffffffffffffff"])
    summary.write_text(json.dumps({"notebook": "nb", "title": "a notebook", "profile": "paper", "claims": [],
                                   "runs_read": listed}, indent=1, sort_keys=True) + "\n")
    now = tmp_path / "edited" / "src"
    shutil.copytree(PACKAGE, now / "fedcompanion", ignore=shutil.ignore_patterns("__pycache__"))
    fedavg = now / "fedcompanion" / "algorithms" / "fedavg.py"
    assert LINE in fedavg.read_text()
    fedavg.write_text(fedavg.read_text().replace(LINE, EDITS[edit]))
    (tmp_path / "work").mkdir()
    done = _python(now, "import sys; from pathlib import Path; from fedcompanion.reproduction.rekey import rekey; "
                        f"sys.exit(rekey(Path({str(results)!r}), Path({str(PACKAGE.parent)!r}), "
                        f"Path({str(tmp_path / 'work')!r})))")
    log = done.stdout + done.stderr
    after = sorted(p.name for p in results.iterdir() if p.is_file())
    read = json.loads(summary.read_text())["runs_read"]
    if edit == "the step halved":
        assert done.returncode == 1 and "0 of 1 groups carried" in log, log
        assert after == stored and read == listed  # nothing renamed, nothing rewritten
        return
    assert done.returncode == 0 and "1 of 1 groups carried (2 runs renamed); 1 summaries" in log, log
    assert len(after) == len(stored) and set(after).isdisjoint(stored)  # every run under its new key
    assert read == sorted([p.stem for p in results.glob("*.json")] + ["ffffffffffffffff"])  # the summary follows
    current = _python(now, "import json; from pathlib import Path; from fedcompanion.reproduction.verify import "
                           "_stored, is_current; print(json.dumps([is_current(m) for m in "
                           f"_stored(Path({str(results)!r}))]))")
    assert json.loads(current.stdout) == [True, True], current.stderr


# ---------------------------------------------------------------------------------- crash safety (fourth pass)
def _old_runs(results: Path) -> dict[str, str]:
    """Runs stored by this code, then made to look as if an older code had keyed them (another code fingerprint,
    other file names), with a summary listing them under those names; returns old -> current hash."""
    sweep(CONFIGS + [dataclasses.replace(CONFIGS[0], seed=2)], results, jobs=1, progress=False)
    renamed = {}
    for k, path in enumerate(sorted(results.glob("*.json"))):
        meta = json.loads(path.read_text())
        meta["config"]["code"] = "0ld0ld0ld0ld"
        meta["record"] = record_digest(meta)
        old = f"{k:016x}"
        (results / f"{path.stem}.csv.gz").rename(results / f"{old}.csv.gz")
        (results / f"{old}.json").write_text(json.dumps(meta, indent=1))
        path.unlink()
        renamed[old] = path.stem
    summary = results / "summaries" / "nb.json"
    summary.parent.mkdir(exist_ok=True)
    summary.write_text(json.dumps({"notebook": "nb", "title": "a notebook", "profile": "paper", "claims": [],
                                   "runs_read": sorted(renamed)}, indent=1, sort_keys=True) + "\n")
    return renamed


class _Crash(BaseException):
    pass


class _CrashAt:
    """Counts file operations and raises :class:`_Crash` at the ``k``-th (a kill -9 there, as far as files go)."""

    def __init__(self, k: int):
        self.k, self.count = k, 0

    def step(self) -> None:
        if self.count == self.k:
            raise _Crash
        self.count += 1


def _listed_runs_stored(results: Path) -> None:
    for h in json.loads((results / "summaries" / "nb.json").read_text())["runs_read"]:
        assert (results / f"{h}.json").is_file() and (results / f"{h}.csv.gz").is_file(), h


def test_rekey_interrupted_at_every_file_operation_loses_no_run(tmp_path, monkeypatch):
    """kill -9 between any two file operations of the carry: every run a summary lists is stored at that moment,
    and the next rekey (its journal replayed) ends with every run under its new key and the summary listing it."""
    real_write, real_unlink = rekey_module.write_atomic, Path.unlink
    for k in range(40):
        results = tmp_path / str(k) / "results"
        renamed = _old_runs(results)
        crash = _CrashAt(k)
        monkeypatch.setattr(rekey_module, "write_atomic", lambda *a, c=crash, **kw: (c.step(), real_write(*a, **kw))[1])
        monkeypatch.setattr(Path, "unlink", lambda self, *a, c=crash, **kw: (c.step(), real_unlink(self, *a, **kw))[1])
        try:
            rekey_module.carry(results, [m for m in _stored(results) if not is_current(m)])
            finished = True
        except _Crash:
            finished = False
        monkeypatch.setattr(rekey_module, "write_atomic", real_write)
        monkeypatch.setattr(Path, "unlink", real_unlink)
        _listed_runs_stored(results)
        if finished:  # every operation done before the k-th crash point: the whole carry is tested
            break
        assert rekey_module.main(["--finish", "--results", str(results)]) == 0  # what the next rekey does first
        _listed_runs_stored(results)
        rekey_module.carry(results, [m for m in _stored(results) if not is_current(m)])
        assert json.loads((results / "summaries" / "nb.json").read_text())["runs_read"] == sorted(renamed.values())
        assert sorted(p.stem for p in results.glob("*.json")) == sorted(renamed.values())
        assert not (results / ".rekey-journal.json").exists()
    assert finished and k > 10


def test_rekey_reads_every_summary_before_moving_anything(tmp_path, capsys):
    results = tmp_path / "results"
    _old_runs(results)
    (results / "summaries" / "a-first.json").write_text('{"notebook": "a", "runs_read": [')  # damaged, sorts first
    before = sorted(p.name for p in results.iterdir())
    assert rekey_module.main(["--before", "HEAD", "--results", str(results)]) == 2
    assert "is not valid JSON" in capsys.readouterr().err
    assert sorted(p.name for p in results.iterdir()) == before


def test_rekey_refuses_an_option_or_unknown_revision(tmp_path):
    for bad in ("--lock", "no-such-revision-xyz"):  # --before=--lock once reached git and locked a worktree
        with pytest.raises(SystemExit, match="is not a"):
            rekey_module.main([f"--before={bad}", "--results", str(tmp_path)])


def test_a_group_is_every_name_flag_and_zero_of_the_config_so_its_cheapest_run_takes_its_runs_branches():
    """Runs that differ in a name, a flag or a number's zero-ness can take other branches of the code, so one of them
    cannot vouch for the other: a convex 100-iteration CEADMM run for a non-convex one (the former grouping, by
    algorithm, task, local solver and curvature only, put them together), momentum 0 for momentum 0.9, a task without
    its bias for one with it. Runs that differ only in a seed, the rounds or a nonzero number (per-client penalties
    differ by seed, element by element) share a group, so a re-key recomputes a handful of runs, not one per run."""
    def meta(seed=0, rounds=100, **changes):
        config = {"task": "least_squares", "task_args": {"num_clients": 4, "dim": 3, "nonconvex": 0.0, "bias": True},
                  "algorithm": "ceadmm", "hyperparameters": {"k0": 5, "sigma": [0.5, 0.7, 0.9, 1.1]}, "rounds": rounds,
                  "local": {"momentum": 0.0}, "seed": seed, "code": "abc", "files": {}}
        for path, value in changes.items():
            *parents, leaf = path.split("__")
            node = config
            for p in parents:
                node = node[p]
            node[leaf] = value
        return {"config": config}

    base = rekey_module.group_of(meta())
    assert rekey_module.group_of(meta(seed=3, rounds=20000, hyperparameters__sigma=[2.0, 0.1, 3.0, 4.0],
                                      hyperparameters__k0=10)) == base
    for change in ({"task_args__nonconvex": 0.1}, {"local__momentum": 0.9}, {"task_args__bias": False},
                   {"hyperparameters__sigma": [0.5, 0.0, 0.9, 1.1]}, {"algorithm": "iceadmm"}):
        assert rekey_module.group_of(meta(**change)) != base, change
