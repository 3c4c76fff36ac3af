"""Every notebook runs end to end under papermill with the smoke profile.

The executed copies land in ``build/executed/``; ``make test`` then re-runs them with nbval and
requires the outputs marked ``# NBVAL_CHECK_OUTPUT`` to come out identical (determinism).
"""
import pytest

from fedcompanion.reproduce import ROOT, execute, notebooks

SMOKE = {"profile": "smoke", "refresh": True, "results_dir": "build/test-results",
         "figures_dir": "build/test-figures"}


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", notebooks(), ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_notebook_runs_with_smoke_profile(notebook):
    out = ROOT / "build" / "executed" / notebook.relative_to(ROOT / "notebooks")
    execute(notebook, out, SMOKE, progress=False)
    assert out.exists()


@pytest.mark.notebook
def test_wrong_parameter_type_is_named(tmp_path):
    import papermill

    with pytest.raises(papermill.PapermillExecutionError, match="'rounds' must be an int, got '10'"):
        execute(ROOT / "notebooks" / "00_tour.ipynb", tmp_path / "bad.ipynb", {"rounds": "10"}, progress=False)
