"""The tuning protocol: equal log grids, the mean over tuning seeds, diverged settings never chosen, edges extended."""
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


def test_tune_extends_an_edge_and_reports_default_and_best(tmp_path):
    # on least squares with a small client lr a larger server step is better until it diverges: the best of
    # [0.1, 0.316, 1] is the edge 1, so the grid grows to 3.16 (and on, while the edge keeps winning)
    spec = Spec(make, {"server_lr": [0.1, 0.316, 1.0]}, {"server_lr": 0.316})
    tuned = tune({"FedAvg": spec}, [0, 1], neg_loss, tmp_path, extend=1)["FedAvg"]
    assert tuned.grid["server_lr"][-1] == 3.16
    table = tuned.scores.groupby("server_lr").score.mean()
    assert tuned.score == table.max() and tuned.setting["server_lr"] == table.idxmax()
    assert tuned.default_score == table[0.316]
    assert "default server_lr 0.316" in tuned.line()


def test_a_setting_that_diverges_on_one_seed_is_never_chosen(tmp_path):
    spec = Spec(make, {"server_lr": [1.0, 100.0]}, {"server_lr": 1.0})
    tuned = tune({"FedAvg": spec}, [0, 1], neg_loss, tmp_path)["FedAvg"]
    assert tuned.setting == {"server_lr": 1.0}
    assert {d["setting"]["server_lr"] for d in tuned.diverged} == {100.0}
    assert all(d["role"] == "tuning" for d in tuned.diverged)
    assert not np.isfinite(tuned.scores[tuned.scores.server_lr == 100.0].score).any()


def test_tuning_needs_two_seeds_and_a_default_inside_the_grid(tmp_path):
    with pytest.raises(ConfigError, match="at least 2 seeds"):
        tune({"FedAvg": Spec(make, {"server_lr": [1.0]}, {"server_lr": 1.0})}, [0], neg_loss, tmp_path)
    with pytest.raises(ConfigError, match="not in its grid"):
        tune({"FedAvg": Spec(make, {"server_lr": [1.0]}, {"server_lr": 0.5})}, [0, 1], neg_loss, tmp_path)


def test_an_extended_grid_stays_on_the_default_s_log_steps():
    from fedcompanion.experiments.tuning import _extend

    assert _extend([0.0316, 0.1, 0.316], -1, 0.1) == [0.01, 0.0316, 0.1, 0.316]
    assert _extend([0.01, 0.0316, 0.1], -1, 0.0316) == [0.00316, 0.01, 0.0316, 0.1]
    assert _extend(log_grid(1e-3), 1, 1e-3) == [1e-4, 0.000316, 1e-3, 0.00316, 1e-2, 0.0316]


def test_tuning_seeds_and_grids_are_refused_by_name_before_any_run(tmp_path):
    """Issue 47: tuning seeds [0, 0] and a grid repeating a value at 3 significant digits crashed deep in pandas."""
    with pytest.raises(ConfigError, match="more than once"):
        tune({"FedAvg": Spec(make, {"server_lr": [0.1, 1.0]}, {"server_lr": 1.0})}, [0, 0], neg_loss, tmp_path)
    with pytest.raises(ConfigError, match="FedAvg server_lr .* repeats the value"):
        tune({"FedAvg": Spec(make, {"server_lr": [0.1, 0.1001, 1.0]}, {"server_lr": 1.0})}, [0, 1], neg_loss,
             tmp_path)
    with pytest.raises(ConfigError, match="increasing"):
        tune({"FedAvg": Spec(make, {"server_lr": [1.0, 0.1]}, {"server_lr": 1.0})}, [0, 1], neg_loss, tmp_path)
    assert not any(tmp_path.iterdir())  # refused before a run was stored


def test_a_score_naming_an_unrecorded_metric_is_named_not_called_divergence(tmp_path):
    """Issue 47: every run finished, but the score read a metric none recorded: "every setting diverged" was wrong."""
    with pytest.raises(ConfigError, match=r"no value for 4 finished run.*They record \[.*'train_loss'"):
        tune({"FedAvg": Spec(make, {"server_lr": [0.1, 1.0]}, {"server_lr": 1.0})}, [0, 1],
             final_score("no_such_metric"), tmp_path)
