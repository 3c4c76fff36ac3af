"""`make test`'s two lanes (tests/suite.py): together they run every test, nbval and verify, and a failing step fails
the whole suite, whichever lane it is in."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import suite  # noqa: E402


def _commands():
    return [" ".join(suite.command(step)[1]) for _, steps in suite.LANES.values() for step in steps]


def test_the_lanes_run_every_test_nbval_and_verify():
    commands = _commands()
    assert any("-m notebook" in c for c in commands) and any("-m not notebook" in c for c in commands)
    # the site's tests are left out of the units' lane only because the notebooks' lane runs them on its copies
    assert any(c.endswith("--ignore=tests/test_site.py") for c in commands)
    assert any(c.endswith("tests/test_site.py") for c in commands)
    assert any("nbval_parallel.py build/executed" in c for c in commands)
    assert any("verify --subset smoke" in c for c in commands)
    assert any("verify --subset methods --results build/test-results" in c for c in commands)
    notebooks = [" ".join(suite.command(s)[1]) for s in suite.LANES["notebooks"][1]]
    assert notebooks.index(next(c for c in notebooks if "-m notebook" in c)) < \
        notebooks.index(next(c for c in notebooks if "nbval" in c))  # nbval re-runs what the smoke runs wrote
    assert notebooks.index(next(c for c in notebooks if "-m notebook" in c)) < \
        notebooks.index(next(c for c in notebooks if "--subset methods" in c))  # and recomputes what they stored


def test_a_failing_step_fails_the_suite_and_stops_its_lane(tmp_path, monkeypatch, capsys):
    python = sys.executable
    monkeypatch.setattr(suite, "LANES", {
        "good": ({}, [[python, "-c", "print('first')"]]),
        "bad": ({}, [[python, "-c", "raise SystemExit(3)"], [python, "-c", "print('never')"]]),
    })
    assert suite.main(["--log-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "first" in out and "never" not in out and "FAILED: bad" in out
    monkeypatch.setattr(suite, "LANES", {"good": ({}, [[python, "-c", "print('first')"]])})
    assert suite.main(["--log-dir", str(tmp_path)]) == 0
