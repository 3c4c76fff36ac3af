"""The arena: its ranking and tie rule on hand-made per-seed tables, its per-seed metrics on a hand-made history,
one protocol for every method, a small end-to-end run, the command line and its place in `make reproduce`."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from fedcompanion import cli
from fedcompanion.reproduction import arena
from fedcompanion.reproduction.report import Summary, _inside, shown_arena
from fedcompanion.reproduction.reproduce import ROOT, part, selected
from fedcompanion.validation import ConfigError

SEEDS = [0, 1, 2, 3, 4]
ACC = arena.TASKS["mnist-dirichlet"]
LOSS = arena.TASKS["qsar"]


def table(values: dict[str, list[float]]) -> pd.DataFrame:
    """A per-seed table as :func:`arena.per_seed` makes it (NaN: the run diverged)."""
    rows = [{"method": m, "seed": s, "status": "ok" if np.isfinite(v) else "diverged", "metric": v,
             "rounds to target": np.nan, "upload KB": 1.0, "client accuracy std": 0.1, "worst-10% accuracy": 0.5}
            for m, vs in values.items() for s, v in zip(SEEDS, vs)]
    return pd.DataFrame(rows).set_index(["method", "seed"])


def test_ranking_names_the_best_its_ties_and_the_worse():
    t = table({"A": [0.90, 0.91, 0.92, 0.90, 0.91],   # best mean
               "B": [0.91, 0.90, 0.91, 0.91, 0.90],   # differences +-0.01 around 0.002: a tie
               "C": [0.80, 0.81, 0.80, 0.82, 0.81]})  # 0.1 below on every seed: worse
    r = arena.ranking(t, ACC, SEEDS).set_index("method")
    assert list(r.index) == ["A", "B", "C"]
    assert list(r["against best"]) == ["best", "tie", "worse"]
    d = np.array([0.90, 0.91, 0.92, 0.90, 0.91]) - np.array([0.80, 0.81, 0.80, 0.82, 0.81])
    assert r.loc["C", "difference"] == pytest.approx(d.mean())
    half = 2.7764451051977987 * d.std(ddof=1) / math.sqrt(5)  # t_{0.975, 4}
    assert r.loc["C", "difference low"] == pytest.approx(d.mean() - half)
    mean, low, high = r.loc["A", ["metric", "metric low", "metric high"]]
    assert mean == pytest.approx(0.908) and low < mean < high


def test_lower_is_better_reverses_the_order_and_the_words():
    t = table({"A": [0.30, 0.31, 0.30, 0.32, 0.31], "C": [0.20, 0.21, 0.20, 0.22, 0.21]})
    assert list(arena.ranking(t, ACC, SEEDS).method) == ["A", "C"]
    r = arena.ranking(t, LOSS, SEEDS)
    assert list(r.method) == ["C", "A"] and list(r["against best"]) == ["best", "worse"]


def test_a_diverged_seed_ranks_last_and_counts_as_a_loss():
    t = table({"A": [0.90, 0.91, 0.92, 0.90, np.nan], "B": [0.80, 0.81, 0.80, 0.82, 0.81]})
    r = arena.ranking(t, ACC, SEEDS).set_index("method")
    assert list(r.index) == ["B", "A"]
    assert r.loc["A", "diverged"] == 1 and r.loc["A", "metric"] == -math.inf
    # the divergence is a loss for A in a sign test (1 win of B against 4 of A's): not significant at 5 seeds
    assert r.loc["A", "against best"] == "tie" and math.isfinite(r.loc["A", "difference"])


def test_per_seed_reads_the_last_round_the_target_and_the_upload():
    rows = []
    for r, acc, floats in ((0, 0.1, 0), (5, 0.86, 5000), (10, 0.9, 10000)):
        for metric, value in (("test_accuracy", acc), ("uploaded_floats", floats), ("client_accuracy_std", 0.2),
                              ("client_accuracy_worst10", 0.4), ("test_loss", 1.0)):
            rows.append({"label": "A", "seed": 0, "status": "ok", "round": r, "client": -1, "metric": metric,
                         "value": value})
    rows.append({"label": "B", "seed": 0, "status": "diverged", "round": 0, "client": -1, "metric": "test_accuracy",
                 "value": 0.1})
    frame = pd.DataFrame(rows).assign(hash=lambda f: f.label.map({"A": "ha", "B": "hb"}))
    frame.attrs["runs"] = pd.DataFrame({"hash": ["ha", "hb"], "diverged_round": [None, 7]})  # as sweep() leaves it
    plan = arena.Plan(clients_per_round=10)
    t = arena.per_seed(frame, ACC, plan)
    a = t.loc[("A", 0)]
    assert a["metric"] == 0.9 and a["rounds to target"] == 5.0  # target 0.85 first reached at round 5
    assert a["initial metric"] == 0.1 and t.loc[("B", 0), "initial metric"] == 0.1  # round 0, diverged or not
    assert a["upload KB"] == pytest.approx(10000 * 4 / 1e3 / (10 * 10))  # float32 floats per client and round
    assert t.loc[("B", 0), "status"] == "diverged" and np.isnan(t.loc[("B", 0), "metric"])
    assert arena.diverged_runs(t, "mnist") == [{"label": "mnist: B", "seed": 0, "round": 7, "role": "evaluation"}]
    assert arena.diverged_runs(arena.per_seed(pd.DataFrame(rows), ACC, plan), "mnist")[0]["round"] is None


def test_every_method_gets_the_same_grid_shape_seeds_and_local_work():
    plan = arena.Plan()
    specs = arena.specs(ACC, list(arena.METHODS), plan)
    assert {tuple(len(v) for v in s.grid.values()) for s in specs.values()} == {(3, 3)}
    for m, s in specs.items():
        assert all(s.default[k] in s.grid[k] for k in s.grid), m
        widths = {k: math.log10(v[-1] / v[0]) for k, v in s.grid.items()}
        assert all(w == pytest.approx(1.0, abs=0.01) for w in widths.values()), (m, widths)
        c = s.make(s.default, 100)
        assert (c.local, c.clients_per_round, c.task_args, c.seed) == (
            {"steps": 10, "batch_size": 32}, 10, ACC.task_args, 100)


def test_other_contenders_get_the_same_protocol_with_their_fixed_switches():
    """An ablation: one algorithm with a part switched off is a contender like any method, on the same grids."""
    off = arena.Contender("adafedadam", {"server_lr": 0.001}, {"alpha": 1.0, "certainty": False})
    contenders = {"AdaFedAdam": arena.METHODS["AdaFedAdam"], "no certainty": off}
    specs = arena.specs(ACC, list(contenders), arena.Plan(), contenders)
    assert specs["no certainty"].grid == specs["AdaFedAdam"].grid
    c = specs["no certainty"].make(specs["no certainty"].default, 100)
    assert c.algorithm == "adafedadam" and c.hyperparameters == {"server_lr": 0.001, "alpha": 1.0, "certainty": False}
    assert c.label == "no certainty"
    with pytest.raises(ConfigError, match="unknown arena algorithm 'FedAvg'"):
        arena.check_names(["qsar"], ["FedAvg"], contenders)


def test_bad_names_and_seeds_are_refused_by_name():
    with pytest.raises(ConfigError, match="unknown arena task 'cifar'"):
        arena.check_names(["cifar"], ["FedAvg"])
    with pytest.raises(ConfigError, match="unknown arena algorithm 'FedSGD'"):
        arena.check_names(["qsar"], ["FedAvg", "FedSGD"])
    with pytest.raises(ConfigError, match="overlap the evaluation seeds"):
        arena.run_arena(["qsar"], ["FedAvg"], arena.Plan(seeds=(0, 1), tune_seeds=(1, 2)), "build/never")


@pytest.mark.slow
def test_a_small_arena_end_to_end_is_plain_json_and_a_report_section(tmp_path):
    plan = arena.Plan(rounds=2, seeds=(0, 1), eval_every=1)
    out = arena.run_arena(["qsar"], ["FedAvg", "FedProx"], plan, tmp_path, jobs=1)
    o = out["qsar"]
    assert list(o.ranking.method) != [] and set(o.ranking.method) == {"FedAvg", "FedProx"}
    # the full grid (Plan's default: one rung), every setting of the 3 x 3 grids on both tuning seeds at the horizon
    assert all(set(t.scores["rounds"]) == {plan.rounds} and len(t.scores) >= 9 * 2 for t in o.tuned.values())
    assert o.runs == sum(len(t.scores) for t in o.tuned.values()) + 2 * 2
    stored = json.loads(json.dumps(o.to_dict()))
    assert stored["ties"][0] == o.ranking.method.iloc[0] and stored["sentence"].startswith("qsar: ")
    text = "\n".join(arena.markdown({"qsar": stored}))
    assert "| 1 | " + o.ranking.method.iloc[0] in text and "test_loss" in text
    again = arena.run_arena(["qsar"], ["FedAvg", "FedProx"], plan, tmp_path, jobs=1)["qsar"]  # from the cache
    pd.testing.assert_frame_equal(again.ranking, o.ranking)


def test_the_command_line_names_a_bad_task(capsys):
    assert cli.main(["arena", "--tasks", "nope"]) == 2
    assert "unknown arena task 'nope'" in capsys.readouterr().err


def test_make_reproduce_runs_the_arenas_qsar_part_and_leaves_the_whole_to_its_own_target():
    paper = [p.stem for p in selected("", "paper")]
    assert "92_arena" in paper and "00_tour" in paper
    nb = next(p for p in selected("", "paper") if p.stem == "92_arena")
    name, parameters = part(nb, "paper", [])
    assert parameters == {"tasks": ["qsar"]} and name == arena.summary_name(["qsar"], arena.METHODS) == "92_arena-qsar"
    assert part(nb, "paper", ["92_arena"]) is None and part(nb, "smoke", []) is None  # make arena: the whole
    assert [p.stem for p in selected("92_arena", "paper")] == ["92_arena"]
    assert "92_arena" in [p.stem for p in selected("", "smoke")]
    assert "arena:" in (ROOT / "Makefile").read_text() and "--only 92_arena" in (ROOT / "Makefile").read_text()
    assert "06_ablation" not in paper and "07_robustness" not in paper and "06_rate" in paper
    both = selected(["92_arena", "adafedadam/06_ablation"], "paper")
    assert sorted(p.stem for p in both) == ["06_ablation", "92_arena"]


def test_make_reproduce_runs_adafedadams_setting_b_and_make_setting_a_the_whole_notebooks():
    """Setting A at the paper's 200 rounds has its own target; `make reproduce` runs notebooks 3 and 4 with
    ``settings=["B"]`` under a part's name. Wrong: the whole notebooks in `make reproduce` (A's 200 rounds there)."""
    paper = {p.stem: p for p in selected("", "paper")}
    for stem, name in (("03_adafedadam", "adafedadam/03_adafedadam-b"),
                       ("04_fairness_front", "adafedadam/04_fairness_front-b")):
        assert part(paper[stem], "paper", []) == (name, {"settings": ["B"]})
        assert part(paper[stem], "paper", [f"adafedadam/{stem}"]) is None  # make setting-a: the whole
    make = (ROOT / "Makefile").read_text()
    assert "setting-a:" in make and "--only adafedadam/03_adafedadam" in make
    assert "03_adafedadam" not in [p.stem for p in selected("adafedadam", "paper")]  # the folder: reproduce's own


def test_a_parts_summary_is_shown_only_where_its_whole_notebooks_is_not(tmp_path):
    """The report, the site and README count each claim once: a part's summary gives way to its whole notebook's.
    Wrong: both kept (every claim of notebook 3 twice); the whole dropped; pruning that forgets the part's runs."""
    from fedcompanion.reproduction.claims.record import Claim, load_summaries, record, whole_of
    from fedcompanion.reproduction.prune import orphans
    from fedcompanion.reproduction.report import wall_time
    from fedcompanion.reproduction.rule.item import Evidence

    assert whole_of("adafedadam/03_adafedadam-b") == "adafedadam/03_adafedadam"
    assert whole_of("92_arena-qsar") == "92_arena" and whole_of("00_tour") == "00_tour"
    seconds = {"adafedadam/03_adafedadam-b": 372.0, "00_tour": 5.0, "adafedadam/03_adafedadam-bx-c": 1.0}
    assert wall_time("adafedadam/03_adafedadam", seconds) == (372.0, "adafedadam/03_adafedadam-b")  # its part's
    assert wall_time("00_tour", seconds) == (5.0, None) and wall_time("adafedadam/04_fairness_front", seconds) is None
    from fedcompanion.reproduction.timings import (  # a whole reproduction keeps only its own names:
        read_timings,
        write_timings,
    )
    write_timings(tmp_path / "t", {"adafedadam/03_adafedadam": 774.0})  # an earlier one, the notebook run whole
    write_timings(tmp_path / "t", {"adafedadam/03_adafedadam-b": 372.0}, elapsed=9.0, parallel=2,
                  only={"adafedadam/03_adafedadam-b"})
    assert read_timings(tmp_path / "t")["notebooks"] == {"adafedadam/03_adafedadam-b": 372.0}  # not the stale 774
    evidence = [Evidence("identity", "B", "q", values=[0.0], tolerance=1e-9)]
    claim = Claim("x.claim", "AdaFedAdam", "c", [], evidence, "n", "s", "d")
    results = tmp_path / "results"
    record("adafedadam/03_adafedadam-b", "part", [claim], results, "paper", [], runs=1)
    assert [s.notebook for s in load_summaries(results)] == ["adafedadam/03_adafedadam-b"]  # no whole yet: shown
    record("adafedadam/03_adafedadam", "whole", [claim], results, "paper", [], runs=1)
    assert [s.notebook for s in load_summaries(results)] == ["adafedadam/03_adafedadam"]
    assert len(load_summaries(results, superseded=True)) == 2
    path = results / "summaries" / "adafedadam--03_adafedadam-b.json"  # a run only the part read is kept
    path.write_text(json.dumps({**json.loads(path.read_text()), "runs_read": ["0123456789abcdef"]}))
    (results / "0123456789abcdef.json").write_text("{}")
    assert orphans(results) == []


def test_a_part_of_the_arena_has_its_own_summary_and_figures_and_the_report_shows_the_whole():
    every = list(arena.METHODS)
    assert arena.summary_name(list(reversed(arena.TASKS)), every) == "92_arena"
    assert arena.summary_name(["qsar", "mnist-shards"], ["FedAvg", "FedVRA"]) == "92_arena-qsar-mnist-shards-2-methods"
    assert arena.figure_name("ranking", "92_arena") == "arena_ranking"
    assert arena.figure_name("fairness", "92_arena-qsar") == "arena_fairness-qsar"
    one = {"diverged": [], "sentence": "s", "runs": 1, "ranking": [], "tuned": {},
           "task": {"description": "d", "metric": "m", "target": 1.0}}
    whole = Summary("92_arena", "t", "paper", [], checks={"arena": {"qsar": one, "mnist-shards": one}},
                    diverged=[{"label": "x", "seed": 1}])
    qsar = Summary("92_arena-qsar", "t", "paper", [], checks={"arena": {"qsar": one}},
                   diverged=[{"label": "x", "seed": 1}])
    assert shown_arena([qsar, whole]) is whole and shown_arena([qsar]) is qsar and shown_arena([]) is None
    assert "figures/arena_ranking-qsar.png" in "\n".join(arena.markdown(qsar.checks["arena"], qsar.notebook))
    assert "figures/arena_ranking.png" in "\n".join(arena.markdown(whole.checks["arena"], whole.notebook))
    assert _inside(qsar, whole) and not _inside(whole, whole) and not _inside(qsar, None)


def test_two_methods_diverged_on_the_same_seed_are_compared_on_the_others():
    """Issue 47: A and B both diverged on seed 4, A better on every other seed. inf - inf used to read as a missing
    run ("does not reproduce"), so the arena called B "better" than the best, and the order was alphabetical."""
    t = table({"B": [0.80, 0.81, 0.80, 0.82, np.nan], "A": [0.90, 0.91, 0.92, 0.90, np.nan],
               "C": [0.70, 0.70, 0.71, 0.70, 0.72]})
    r = arena.ranking(t, ACC, SEEDS).set_index("method")
    assert list(r.index) == ["C", "A", "B"]  # C finished every seed; A before B on the seeds both finished
    e = arena.per_seed_evidence(t, "metric", "A", "B", "higher", "s")
    assert e.n == 4 and e.both_diverged == [4] and e.word() == "reproduces"
    assert "both diverged on seed 4" in e.describe()


def test_seeds_are_distinct_non_negative_integers_where_they_are_declared(capsys):
    for bad, match in (((0, 0), "more than once"), ((-1, 0), ">= 0"), ((0,), "at least 2")):
        with pytest.raises(ConfigError, match=match):
            arena.Plan(seeds=bad)
    with pytest.raises(ConfigError, match="more than once"):
        arena.Plan(tune_seeds=(100, 100))
    assert cli.main(["arena", "--seeds", "0", "0"]) != 0
    assert "more than once" in capsys.readouterr().err
