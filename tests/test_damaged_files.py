"""Issue 47, group 6 and its weak cases: every bookkeeping file the report, the site and verify read is refused with
the file and the field named when it is damaged, never a traceback deep in a library; and the commands that could
replace a front page or select every notebook by accident refuse."""
import json
import shutil
from pathlib import Path

import pytest

from fedcompanion import cli
from fedcompanion.infra.atomic import DamagedFile
from fedcompanion.reproduction.report import ROOT, record, render

SUMMARY = "fedvra--04_against_baselines.json"


@pytest.fixture
def results(tmp_path) -> Path:
    """A results folder holding one committed summary and the committed bookkeeping files."""
    folder = tmp_path / "results" / "summaries"
    folder.mkdir(parents=True)
    for name in (SUMMARY, "_timings.json", "_history.json"):
        shutil.copy(ROOT / "results" / "summaries" / name, folder / name)
    return tmp_path / "results"


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_the_intact_files_make_a_report(results):
    assert "FedVRA" in render(results)


@pytest.mark.parametrize("name, damage, message", [
    (SUMMARY, lambda p: _edit(p, lambda d: d["checks"]["tuned"]["FedADMM (uniform weights)"].update(
        default_score=None)),
     r"checks\.tuned\.FedADMM \(uniform weights\)\.default_score' should be a number, got None"),
    (SUMMARY, lambda p: p.write_text(p.read_text(), encoding="utf-16"), "is not UTF-8 text"),
    (SUMMARY, lambda p: _edit(p, lambda d: d["claims"][0]["evidence"][0].update(kind="vibes")),
     r"claims\[0\] .* is not a claim the rule can read: Evidence kind"),
    (SUMMARY, lambda p: _edit(p, lambda d: d["claims"][0].pop("paper")), r"'claims\[0\]\.paper' is missing"),
    ("_timings.json", lambda p: _edit(p, lambda d: d["notebooks"].update({"fedvra/04": "slow"})),
     r"'notebooks\.fedvra/04' should be a number, got 'slow'"),
    ("_timings.json", lambda p: p.write_text("<<<<<<< HEAD\n" + p.read_text() + "=======\n{}\n>>>>>>> other\n"),
     "merge-conflict markers"),
    ("_history.json", lambda p: p.write_text(p.read_text()[: len(p.read_text()) // 2]),
     r"not valid JSON .* cut short"),
])
def test_a_damaged_bookkeeping_file_is_named_with_its_field(results, name, damage, message, capsys):
    path = results / "summaries" / name
    damage(path)
    with pytest.raises(DamagedFile, match=message) as caught:
        render(results)
    assert str(path) in str(caught.value)
    code = cli.main(["report", "--results", str(results), "--output", str(results / "R.md"), "--readme", ""])
    assert code == 2 and name in capsys.readouterr().err and not (results / "R.md").exists()


def test_an_executed_notebook_cut_in_half_is_named_by_the_site(tmp_path):
    from fedcompanion.reproduction.site import _notebook

    nb = tmp_path / "cut.ipynb"
    text = (ROOT / "notebooks" / "00_tour.ipynb").read_text()
    nb.write_text(text[: len(text) // 2])
    with pytest.raises(DamagedFile, match=r"cut\.ipynb: the executed notebook is not valid JSON"):
        _notebook(nb)
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": 7}]}))
    with pytest.raises(DamagedFile, match=r"cells\[0\]\.source' should be"):
        _notebook(nb)


def test_verify_names_a_damaged_run_record_and_refuses_two_code_versions_of_one_config(tmp_path, monkeypatch,
                                                                                         capsys):
    import fedcompanion.experiments.config as experiments
    from fedcompanion.experiments import ExperimentConfig, run_config, store, sweep
    from fedcompanion.reproduction.verify import _stored, compare_folders
    from fedcompanion.reproduction.verify import main as verify

    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=3), algorithm="fedavg",
                              rounds=2, clients_per_round=2, lr=0.1, seed=0)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    sweep([config], ours, jobs=1, progress=False)
    for code in ("version-a", "version-b"):  # one config, two other code versions, neither this code's
        monkeypatch.setattr(experiments, "fingerprint", lambda roots, code=code: code)
        store(config, run_config(config), theirs)
    monkeypatch.undo()
    assert len(list(theirs.glob("*.json"))) == 2
    with pytest.raises(Exception, match="several code versions"):
        compare_folders(ours, theirs)
    assert verify(["--results", str(ours), "--compare", str(theirs)]) == 2
    assert "several code versions" in capsys.readouterr().err
    (theirs / "cut.json").write_text('{"config": {')
    damaged: list[str] = []
    _stored(theirs, damaged)
    assert len(damaged) == 1 and "cut.json" in damaged[0] and "not valid JSON" in damaged[0]


def test_a_deeply_nested_yaml_file_is_refused_without_a_recursion_error(tmp_path, capsys):
    for name, text in (("lists", "rounds: " + "[" * 1000 + "]" * 1000 + "\n"),
                       ("maps", "".join(" " * i + "k:\n" for i in range(5000)))):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        assert cli.main(["run", str(path), "--results", str(tmp_path / "r")]) == 2
        assert "more than 32 deep" in capsys.readouterr().err


def test_the_report_does_not_replace_a_readme(results, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- claims:start -->\nold table\n<!-- claims:end -->\n")
    assert cli.main(["report", "--results", str(results), "--output", str(readme), "--readme", ""]) == 2
    assert "claims table" in capsys.readouterr().err and readme.read_text().startswith("intro\n")


def test_record_refuses_a_bookkeeping_name(results):
    before = (results / "summaries" / "_timings.json").read_text()
    with pytest.raises(ValueError, match="bookkeeping"):
        record("_timings", "t", [], results, "paper")
    assert (results / "summaries" / "_timings.json").read_text() == before


def test_reproduce_only_an_empty_text_or_a_folder(capsys):
    from fedcompanion.reproduction.reproduce import main, selected

    assert main(["--only", ""]) == 2 and "empty text" in capsys.readouterr().err
    fedvra = [p.stem for p in selected(["fedvra"], "paper")]
    assert "04_against_baselines" in fedvra and "07_robustness" not in fedvra  # the arena's is named on its own
    assert [p.stem for p in selected(["fedvra/07"], "paper")] == ["07_robustness"]
    assert [p.stem for p in selected(["04_against"], "paper")] == ["04_against_baselines"]


def test_a_summary_left_by_a_renamed_notebook_is_reported_with_a_warning(results, caplog):
    from fedcompanion.reproduction.report import load_summaries, orphans, write_report

    assert orphans(load_summaries(ROOT / "results")) == []  # every committed summary has its notebook
    path = results / "summaries" / SUMMARY
    _edit(path, lambda d: d.update(notebook="fedvra/04_renamed_since"))
    claims = len(json.loads(path.read_text())["claims"])
    assert orphans(load_summaries(results)) == [("fedvra/04_renamed_since", claims)]
    write_report(results, results / "R.md", readme=None, figures=results / "figures")
    assert "fedvra/04_renamed_since" in caplog.text and "renamed or removed" in caplog.text


def test_record_returns_the_verdicts_a_notebook_shows_and_a_path(tmp_path):
    """Issue 46: every notebook's last output was a PosixPath; now it is the verdicts, with each item's effect."""
    import os

    from fedcompanion.reproduction.report import Claim, Recorded
    from fedcompanion.reproduction.rule.item import paired

    item = paired("A", "x vs y", "loss", "lower", [1.0, 1.1, 0.9, 1.0, 1.05], [2.0] * 5, range(5))
    shown = record("fedvra/99_demo", "Demo", [Claim("demo.claim", "FedVRA", "x beats y", [], [item])], tmp_path,
                   "smoke")
    assert isinstance(shown, Recorded) and os.fspath(shown).endswith("fedvra--99_demo.json")
    assert json.loads(Path(shown).read_text())["notebook"] == "fedvra/99_demo"
    markdown = shown._repr_markdown_()
    row = ("| x beats y (`demo.claim`, [report](../../REPRODUCTION.md#demo-claim)) | **reproduces** | "
           "1 of 1 item holds |")
    assert markdown.startswith("**Verdicts**") and row in markdown
    assert "method - baseline -0.99 [" in markdown and "demo.claim: reproduces" in repr(shown)
