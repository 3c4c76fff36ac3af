"""The artifact: the report is generated (and matches the committed copy), every tuned grid's choice is inside its
grid, the citation file is valid, the command line works, and the site builds without warnings."""
import json
from datetime import date
from pathlib import Path

import pytest

from fedcompanion import cli
from fedcompanion.experiments import ExperimentConfig, sweep
from fedcompanion.reproduction.report import README_END, README_START, load_summaries, render, verdict_counts
from fedcompanion.reproduction.timings import read_timings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


def test_reproduction_report_matches_the_committed_results():
    assert load_summaries(RESULTS), "results/summaries/ holds the summaries of the last full run"
    assert render(RESULTS) == (ROOT / "REPRODUCTION.md").read_text(), "run `fedcompanion report` and commit"


def test_readme_verdict_summary_is_generated_from_the_same_files():
    text = (ROOT / "README.md").read_text()
    table = text.split(README_START)[1].split(README_END)[0].strip()
    assert table == verdict_counts(load_summaries(RESULTS), read_timings(RESULTS))
    claims = sum(len(s.claims) for s in load_summaries(RESULTS))
    assert f"| **all** | {claims} |" in table


def test_readmes_wall_time_column_is_the_last_reproductions():
    """The notebook table's last column is generated from _timings.json (fedcompanion report rewrites it): the cold
    time and, measured on a fresh clone (benchmarks/fresh_clone.py), the time from the committed results."""
    from fedcompanion.reproduction.report import with_costs

    text = (ROOT / "README.md").read_text()
    timings = read_timings(RESULTS)
    assert with_costs(text, timings["notebooks"], timings.get("warm", {}).get("notebooks")) == text
    assert "| `adafedadam/03_adafedadam` |" in text and " s |\n" in text


def test_readme_is_a_front_door():
    """At most ~150 lines, and what a newcomer needs to reach a running notebook: prerequisites, the commands, the
    activation, the notebooks in reading order, and how to cite."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for needed in ("## Prerequisites", "make env", "source .venv/bin/activate", "make lab", "make reproduce",
                   "make test", "## Notebooks", "@software{", "REPRODUCTION.md"):
        assert needed in text, needed
    from fedcompanion.reproduction.reproduce import notebooks, reading_order

    order = [p.relative_to(ROOT / "notebooks").with_suffix("").as_posix() for p in reading_order(notebooks())]
    positions = [text.index(f"`{name}`") for name in order]
    assert positions == sorted(positions), "README lists the notebooks in reading order"


def test_the_readmes_run_by_column_is_what_the_make_targets_run():
    """Each notebook's row names the target that executes it at the paper profile (`make reproduce` runs
    ``reproduce.selected("", "paper")``; the others are ``OWN_TARGET``'s); a notebook moved between targets without
    the README following fails here."""
    from fedcompanion.reproduction.reproduce import OWN_TARGET, PART_IN_REPRODUCE, notebooks, selected

    text = (ROOT / "README.md").read_text()
    in_reproduce = set(selected("", "paper"))
    for path in notebooks():
        name = path.relative_to(ROOT / "notebooks").with_suffix("").as_posix()
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        run_by = row.strip("|").split("|")[2]  # notebook | what it shows | run by | wall time
        own = next((target for key, target in OWN_TARGET.items() if path.stem.startswith(key)), None)
        expected = [f"`{own}`"] if own else []
        if path in in_reproduce:
            expected.append("make reproduce")
        assert expected and all(e in run_by for e in expected), (name, run_by, expected)
        assert (path.stem in PART_IN_REPRODUCE) == ("(its " in run_by), name  # "(its QSAR panel: `make reproduce`)"


def test_every_summary_is_from_the_paper_profile_and_every_notebook_has_one():
    summaries = {s.notebook: s for s in load_summaries(RESULTS)}
    notebooks = {str(p.relative_to(ROOT / "notebooks").with_suffix("")) for p in (ROOT / "notebooks").rglob("*.ipynb")}
    assert notebooks <= set(summaries), f"missing summaries: {sorted(notebooks - set(summaries))}"
    assert {s.profile for s in summaries.values()} == {"paper"}


# every claim carries a control, its test applied to a method or setting the claim excludes (issue 43)
CLAIMS = sorted({c.id for s in load_summaries(RESULTS) for c in s.claims})


@pytest.mark.parametrize("claim_id", CLAIMS)
def test_every_claim_carries_a_control_its_test_rejects(claim_id):
    """The committed evidence of each claim includes a control and the test rejected it (a claim whose control passed
    would read "not testable here"): a rate with a fixed batch, gradient descent that barely moves, AdaFedAdam on
    another objective, ADMM with too small a penalty, a special case for "not a special case", the initial model (no
    training) in the method's place for a paired "faster", "more accurate" or "robust" claim, plain averaging for
    "restores the minimax approach", total iterations for "fewer rounds", another run of the same method for "much
    less time"."""
    from fedcompanion.reproduction.rule.claim import rejected

    for claim in (c for s in load_summaries(RESULTS) for c in s.claims if c.id == claim_id):
        if all(e.kind == "untestable" for e in claim.evidence):  # nothing run: the reason instead of a control
            assert claim.verdict == "not testable here" and all(e.reason for e in claim.evidence), claim_id
            continue
        assert claim.controls, f"{claim_id} has no control"
        if not rejected(claim.controls):  # the rule then withholds every word that holds
            assert claim.verdict == "not testable here", claim_id

@pytest.mark.slow
@pytest.mark.parametrize("notebook", ["fedvra/04_against_baselines", "adafedadam/03_adafedadam"])
def test_tuned_step_sizes_lie_inside_their_grids(notebook):
    """Every tuned step size is inside its (possibly extended) grid. A regulariser whose best value is its grid's
    lower edge (FedProx's mu, q-FedAvg's q: the limit 0 is FedAvg) is allowed there, and the report names it."""
    summary = {s.notebook: s for s in load_summaries(RESULTS)}[notebook]
    tuned = summary.checks["tuned"]
    assert tuned and all(not {"lr", "server_lr"} & set(choice["at_edge"]) for choice in tuned.values()), tuned
    for choice in tuned.values():
        for name in choice["at_edge"]:
            assert choice["value"][name] == choice["grid"][name][0], (name, choice)
    assert "chosen at an edge" in render(RESULTS) or not any(c["at_edge"] for c in tuned.values())


def test_readme_bibtex_matches_the_citation_file():
    import re

    import yaml

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    bib = (ROOT / "README.md").read_text().split("@software{")[1].split("\n}")[0]
    fields = dict(re.findall(r"(\w+)\s*=\s*\{+(.*?)\}+,?$", bib, re.M))
    assert fields["title"] == cff["title"] and fields["version"] == cff["version"]
    assert fields["year"] == str(cff["date-released"])[:4] and fields["license"] == cff["license"]


def test_one_version_everywhere():
    """pyproject.toml holds the version; the package reads it (importlib.metadata), the citation and the Flower app
    repeat it (a release bumps all three, and this test names the one left behind)."""
    import re

    import yaml

    import fedcompanion

    def project_version(path):  # (no tomllib: Python 3.10 is supported)
        return re.search(r'^version = "(.+)"$', path.read_text(), re.M)[1]

    version = project_version(ROOT / "pyproject.toml")
    assert fedcompanion.__version__ == version
    assert str(yaml.safe_load((ROOT / "CITATION.cff").read_text())["version"]) == version, "CITATION.cff"
    assert project_version(ROOT / "examples" / "flower" / "pyproject.toml") == version, "examples/flower"


def test_papermill_nbformat_and_ray_import_no_parser_that_costs_seconds_in_every_process():
    """Every papermill or nbformat process and every Ray process (driver, monitors, both agents, each worker) imports
    jsonschema; from 4.25 its format-nongpl extra (jupyter-events asks for it) brings rfc3987-syntax, whose import
    builds a Lark parser: 2.6 s of CPU each, which made Ray's start-up about 3x longer (benchmarks/ray_startup.py)
    and, on a busy 2-core machine, longer than the raylet waits for its agents (it crashed; the CI's Flower notebook
    failed three attempts). The pin in pyproject.toml keeps it out; an environment that has it fails here."""
    import importlib.util
    import subprocess
    import sys

    modules = ["papermill", "nbformat", *(["ray"] if importlib.util.find_spec("ray") else [])]
    loaded = subprocess.run([sys.executable, "-c", f"import sys, {', '.join(modules)}; "
                             "print(sorted(m for m in ('rfc3987_syntax', 'lark') if m in sys.modules))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", f"importing {', '.join(modules)} loads {loaded}: pin jsonschema<4.25 (pyproject.toml)"

def test_citation_file_is_valid_cff():
    import jsonschema
    import yaml

    schema = json.loads((ROOT / "tests" / "data" / "cff-1.2.0.schema.json").read_text())  # CFF 1.2.0's own schema
    data = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    if isinstance(data.get("date-released"), date):
        data["date-released"] = data["date-released"].isoformat()
    jsonschema.validate(data, schema)
    assert {r["title"].split(":")[0] for r in data["references"]} >= {
        "Beyond ADMM", "Communication-Efficient ADMM-based Federated Learning", "Accelerating Fair Federated Learning"}
    assert json.loads((ROOT / ".zenodo.json").read_text())["version"] == data["version"]


def test_cli_lists_and_runs_a_yaml_sweep(tmp_path, capsys):
    assert cli.main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "adafedadam" in listing and "server_lr=0.001" in listing and "dirichlet  alpha=0.5, min_size=2" in listing
    assert "fedavgm" in listing and "quantity   beta=1.0, min_size=2" in listing
    assert "models (task_args model): linear, logistic, mlp, cnn, cifar_cnn" in listing and "batched, loop" in listing
    config = tmp_path / "sweep.yaml"
    config.write_text("base:\n  task: least_squares\n  task_args: {num_clients: 4, dim: 3}\n  rounds: 3\n"
                      "  clients_per_round: 2\n  local: {steps: 2, batch_size: null}\n"
                      "grid:\n  algorithm: [fedavg, fedvra]\n  seed: [0, 1]\n")
    assert cli.main(["run", str(config), "--results", str(tmp_path / "out"), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 run(s)" in out and "algorithm=fedvra, seed=1" in out


@pytest.mark.parametrize("text,message", [
    ("task: dataset\nlerning_rate: 0.1\n", "unknown key 'lerning_rate' in experiment 0"),
    ("base: {task: dataset}\ngrid: {lr: 0.1}\n", "'grid' of .* must map keys to non-empty lists"),
    ("base: {task: dataset}\ngrid: {lrr: [0.1]}\n", "unknown grid key 'lrr'"),
    ("basis: {}\ngrid: {}\n", "unknown key 'basis'"),
    ("task: [unclosed\n", "not valid YAML"),
])
def test_cli_names_bad_config_keys(tmp_path, capsys, text, message):
    import re

    config = tmp_path / "bad.yaml"
    config.write_text(text)
    assert cli.main(["run", str(config), "--results", str(tmp_path)]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_wall_times_are_recorded_only_from_an_empty_cache(tmp_path):
    from fedcompanion.reproduction.reproduce import from_empty_cache

    assert from_empty_cache(tmp_path)
    (tmp_path / "summaries").mkdir()
    (tmp_path / "summaries" / "_timings.json").write_text("{}")
    assert from_empty_cache(tmp_path), "summaries are not runs"
    (tmp_path / "0123456789abcdef.json").write_text("{}")
    assert from_empty_cache(tmp_path), "not a run"
    config = ExperimentConfig(task="least_squares", task_args=dict(num_clients=4, dim=3), algorithm="fedavg",
                              rounds=1, clients_per_round=2, local=dict(steps=1), per_client_metrics=False)
    sweep([config], tmp_path)
    assert not from_empty_cache(tmp_path)
    stored = next(p for p in tmp_path.glob("*.json") if p.stem != "0123456789abcdef")
    meta = json.loads(stored.read_text())
    stored.write_text(json.dumps({**meta, "config": {**meta["config"], "code": "another code"}}))
    assert from_empty_cache(tmp_path), "a run made by other code is computed again, never read"
    assert not from_empty_cache(RESULTS), "the committed results are a warm cache: a re-run keeps their timings"


def test_the_report_lists_the_platform_that_computed_each_run(tmp_path):
    """Issue 28's newcomer item: a reproduction that reads runs computed elsewhere says so (per-run provenance)."""
    from fedcompanion.reproduction.report import provenance

    def run(name, cpu, torch_version):
        platform = {"cpu": cpu, "cpu_capability": "AVX512", "blas": "MKL 2024.2", "torch": torch_version}
        (tmp_path / f"{name}.json").write_text(json.dumps({"platform": platform}))

    run("a", "GenuineIntel cpu family 6 model 167", "2.14.1")
    run("b", "GenuineIntel cpu family 6 model 167", "2.14.1")
    run("c", "AuthenticAMD cpu family 25 model 17", "2.14.1")
    assert provenance(tmp_path) == {("GenuineIntel cpu family 6 model 167", "AVX512, MKL 2024.2", "2.14.1"): 2,
                                    ("AuthenticAMD cpu family 25 model 17", "AVX512, MKL 2024.2", "2.14.1"): 1}
    assert "## Where the runs were computed" in (ROOT / "REPRODUCTION.md").read_text()


def test_every_committed_run_is_read_by_a_notebook():
    """Each summary lists the runs its notebook read, and results/ holds no other (`python -m
    fedcompanion.reproduction.prune
    --delete` removes them): a run from an abandoned grid would otherwise ride along in every clone."""
    from fedcompanion.reproduction.prune import orphans

    assert orphans(RESULTS) == []


def test_the_command_lines_help_is_plain_text_and_its_example_sweep_runs(tmp_path, capsys):
    """`fedcompanion --help` printed reStructuredText (``fedcompanion``, :class:`...`); `run --help` named no file to
    start from. The example it names runs and caches."""
    for argv in (["--help"], ["run", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        text = capsys.readouterr().out
        assert "``" not in text and ":class:" not in text and "::" not in text
    assert "examples/sweep.yaml" in text
    assert cli.main(["run", str(ROOT / "examples" / "sweep.yaml"), "--results", str(tmp_path), "--jobs", "1"]) == 0
    assert "4 run(s)" in capsys.readouterr().out and len(list(tmp_path.glob("*.json"))) == 4
