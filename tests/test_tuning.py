"""The tuning protocol: equal log grids, the full horizon by successive halving, the mean over tuning seeds apart from
the evaluation seeds, diverged settings and their smaller neighbours never chosen, edges extended."""
import numpy as np
import pytest

from fedcompanion.experiments import ExperimentConfig, Spec, final_score, log_grid, tune
from fedcompanion.validation import ConfigError


def test_log_grid_is_centred_and_equally_wide():
    assert log_grid(1.0) == [0.1, 0.316, 1.0, 3.16, 10.0]
    assert log_grid(1e-3, 2.0, 5) == [1e-4, 0.000316, 1e-3, 0.00316, 1e-2]
    assert log_grid(0.1, 1.0, 3) == [0.0316, 0.1, 0.316]
    with pytest.raises(ConfigError, match="centre > 0"):
        log_grid(0.0)


def make(setting, seed, rounds=6):
    return ExperimentConfig(task="least_squares", task_args={"num_clients": 4, "dim": 3}, algorithm="fedavg",
                            hyperparameters={"server_lr": setting["server_lr"]}, rounds=rounds, clients_per_round=4,
                            lr=0.05, local={"steps": 2, "batch_size": None}, seed=seed, label="FedAvg")


def neg_loss(frame):
    return -final_score("train_loss")(frame)


EVAL = [0, 1, 2]  # the evaluation seeds every test's tuning must stay away from
TUNE = [100, 101]


def test_tune_extends_an_edge_and_reports_default_and_best(tmp_path):
    # on least squares with a small client lr a larger server step is better until it diverges: the best of
    # [0.1, 0.316, 1] is the edge 1, so the grid grows to 3.16; the choice and the default are scored at the full
    # horizon (6 rounds), where the claims are judged
    spec = Spec(make, {"server_lr": [0.1, 0.316, 1.0]}, {"server_lr": 0.316})
    tuned = tune({"FedAvg": spec}, TUNE, neg_loss, tmp_path, evaluation_seeds=EVAL, extend=1)["FedAvg"]
    assert tuned.grid["server_lr"][-1] == 3.16
    table = tuned.table()
    full = table[table["rounds"] == 6].set_index("server_lr").score
    assert tuned.score == full.max() and tuned.setting["server_lr"] == full.idxmax()
    assert tuned.default_score == full[0.316]
    assert "default server_lr 0.316" in tuned.line()


def test_successive_halving_runs_the_whole_grid_only_at_its_first_rung(tmp_path):
    """5 settings x 2 seeds at 1 round, the best 2 at 2 rounds, the best (and the default) at the full 6; the
    rounds it cost against the full grid at 6 rounds. rungs=1 is that full grid."""
    from fedcompanion.experiments.tuning import rung_rounds

    assert rung_rounds(30, 5, 3, 3) == [5, 10, 30] and rung_rounds(40, 1, 3, 3) == [5, 14, 40]
    assert rung_rounds(6, 1, 1, 3) == [6] and rung_rounds(4, 2, 3, 3) == [2, 4]
    spec = Spec(make, {"server_lr": [0.01, 0.0316, 0.1, 0.316, 1.0]}, {"server_lr": 0.1})
    halved = tune({"FedAvg": spec}, TUNE, neg_loss, tmp_path, evaluation_seeds=EVAL, extend=0)["FedAvg"]
    counts = halved.scores.groupby("rounds").size().to_dict()
    assert counts == {1: 10, 2: 4, 6: 4}, counts
    assert halved.rounds_run == 10 * 1 + 4 * 2 + 4 * 6 and halved.rounds_full_grid == 5 * 2 * 6
    full = tune({"FedAvg": spec}, TUNE, neg_loss, tmp_path, evaluation_seeds=EVAL, extend=0, rungs=1)["FedAvg"]
    assert set(full.scores["rounds"]) == {6} and len(full.scores) == 10
    assert halved.setting == full.setting  # here, the same choice for 42 of the 60 rounds


def test_the_choice_is_never_the_last_step_before_a_divergence(tmp_path):
    """The stability rule: 1.0 scores best of [0.316, 1, 100], but 100 diverges on the tuning seeds, so 1.0 sits at
    the edge of stability and 0.316 is taken; the wrong protocol (no step sizes named: the old rule) takes 1.0."""
    grid = {"server_lr": [0.316, 1.0, 100.0]}
    stable = tune({"FedAvg": Spec(make, grid, {"server_lr": 0.316})}, TUNE, neg_loss, tmp_path,
                  evaluation_seeds=EVAL, extend=0, rungs=1)["FedAvg"]
    edge = tune({"FedAvg": Spec(make, grid, {"server_lr": 0.316}, steps=())}, TUNE, neg_loss, tmp_path,
                evaluation_seeds=EVAL, extend=0, rungs=1)["FedAvg"]
    assert edge.setting == {"server_lr": 1.0} and stable.setting == {"server_lr": 0.316}
    assert stable.at_edge == ["server_lr"] and stable.score < edge.score
    with pytest.raises(RuntimeError, match="borders a divergence"):
        tune({"FedAvg": Spec(make, {"server_lr": [1.0, 100.0]}, {"server_lr": 100.0})}, TUNE, neg_loss, tmp_path,
             evaluation_seeds=EVAL, rungs=1)


def test_the_stability_rule_never_removes_the_default_so_no_choice_scores_below_it(tmp_path):
    """Fig. 3's SCAFFOLD: its default scored best at the full horizon and never diverged, but its larger neighbour
    diverged on a tuning seed, so the old rule ruled the default out and chose a smaller step that scored below it.
    The default is removed only by its own divergence; a choice never scores below it."""
    grid = {"server_lr": [0.316, 1.0, 100.0]}
    tuned = tune({"FedAvg": Spec(make, grid, {"server_lr": 1.0})}, TUNE, neg_loss, tmp_path, evaluation_seeds=EVAL,
                 extend=0, rungs=1)["FedAvg"]
    assert tuned.setting == {"server_lr": 1.0}  # the old rule: 0.316, scoring below the default
    assert tuned.score == tuned.default_score


def test_tuning_seeds_that_overlap_the_evaluation_seeds_are_refused(tmp_path):
    spec = Spec(make, {"server_lr": [0.1, 1.0]}, {"server_lr": 1.0})
    with pytest.raises(ConfigError, match=r"seeds \[1, 5\] overlap the evaluation seeds \[0, 1, 2\] at \[1\]"):
        tune({"FedAvg": spec}, [1, 5], neg_loss, tmp_path, evaluation_seeds=EVAL)
    assert not any(tmp_path.iterdir())


def test_a_setting_that_diverges_on_one_seed_is_never_chosen(tmp_path):
    spec = Spec(make, {"server_lr": [1.0, 100.0]}, {"server_lr": 1.0}, steps=())
    tuned = tune({"FedAvg": spec}, TUNE, neg_loss, tmp_path, evaluation_seeds=EVAL, rungs=1)["FedAvg"]
    assert tuned.setting == {"server_lr": 1.0}
    assert {d["setting"]["server_lr"] for d in tuned.diverged} == {100.0}
    assert all(d["role"] == "tuning" for d in tuned.diverged)
    assert not np.isfinite(tuned.scores[tuned.scores.server_lr == 100.0].score).any()


def test_tuning_needs_two_seeds_and_a_default_inside_the_grid(tmp_path):
    with pytest.raises(ConfigError, match="at least 2 seeds"):
        tune({"FedAvg": Spec(make, {"server_lr": [1.0]}, {"server_lr": 1.0})}, [0], neg_loss, tmp_path,
             evaluation_seeds=EVAL)
    with pytest.raises(ConfigError, match="not in its grid"):
        tune({"FedAvg": Spec(make, {"server_lr": [1.0]}, {"server_lr": 0.5})}, TUNE, neg_loss, tmp_path,
             evaluation_seeds=EVAL)


def test_an_extended_grid_stays_on_the_default_s_log_steps():
    from fedcompanion.experiments.tuning import _extend

    assert _extend([0.0316, 0.1, 0.316], -1, 0.1) == [0.01, 0.0316, 0.1, 0.316]
    assert _extend([0.01, 0.0316, 0.1], -1, 0.0316) == [0.00316, 0.01, 0.0316, 0.1]
    assert _extend(log_grid(1e-3), 1, 1e-3) == [1e-4, 0.000316, 1e-3, 0.00316, 1e-2, 0.0316]


def test_tuning_seeds_and_grids_are_refused_by_name_before_any_run(tmp_path):
    """Issue 47: tuning seeds [0, 0] and a grid repeating a value at 3 significant digits crashed deep in pandas."""
    with pytest.raises(ConfigError, match="more than once"):
        tune({"FedAvg": Spec(make, {"server_lr": [0.1, 1.0]}, {"server_lr": 1.0})}, [0, 0], neg_loss, tmp_path,
             evaluation_seeds=[9])
    with pytest.raises(ConfigError, match="FedAvg server_lr .* repeats the value"):
        tune({"FedAvg": Spec(make, {"server_lr": [0.1, 0.1001, 1.0]}, {"server_lr": 1.0})}, [0, 1], neg_loss,
             tmp_path, evaluation_seeds=[9])
    with pytest.raises(ConfigError, match="increasing"):
        tune({"FedAvg": Spec(make, {"server_lr": [1.0, 0.1]}, {"server_lr": 1.0})}, TUNE, neg_loss, tmp_path,
             evaluation_seeds=EVAL)
    assert not any(tmp_path.iterdir())  # refused before a run was stored


def test_a_score_naming_an_unrecorded_metric_is_named_not_called_divergence(tmp_path):
    """Issue 47: every run finished, but the score read a metric none recorded: "every setting diverged" was wrong."""
    with pytest.raises(ConfigError, match=r"no value for 4 finished run.*They record \[.*'train_loss'"):
        tune({"FedAvg": Spec(make, {"server_lr": [0.1, 1.0]}, {"server_lr": 1.0})}, [0, 1],
             final_score("no_such_metric"), tmp_path, evaluation_seeds=[9])


def test_halving_runs_the_choices_larger_neighbour_to_the_full_horizon(tmp_path):
    """Fig. 3's lesson (docs/benchmarks.md): halving stopped a larger-step neighbour at its first rung, before it
    diverged, so it chose the setting next to a late divergence that the full grid rules out. Here server lr 8
    diverges at rounds 15-17 but scores last at 4 rounds; 3.16 scores best. The full grid takes the default 1.0; so
    must halving (the old promotion chose 3.16), by running 8 to round 30 before choosing 3.16."""
    def make30(setting, seed):
        return make(setting, seed, rounds=30)

    spec = Spec(make30, {"server_lr": [1.0, 3.16, 8.0]}, {"server_lr": 1.0})
    full = tune({"FedAvg": spec}, TUNE, neg_loss, tmp_path, evaluation_seeds=EVAL, extend=0, rungs=1)["FedAvg"]
    halved = tune({"FedAvg": spec}, TUNE, neg_loss, tmp_path, evaluation_seeds=EVAL, extend=0)["FedAvg"]
    assert full.setting == {"server_lr": 1.0}
    assert halved.setting == full.setting
    last = halved.scores[halved.scores["rounds"] == 30]
    assert set(last.server_lr) == {1.0, 3.16, 8.0} and not last[last.server_lr == 8.0].ok.any()
    assert halved.scores.groupby("rounds").size().to_dict() == {4: 6, 10: 2, 30: 6}
