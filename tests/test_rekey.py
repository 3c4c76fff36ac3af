"""rekey carries committed runs across a code change only where their numbers stay as they were: a number-neutral
edit (a local name) carries every run under its new key; an edit that moves the numbers (FedAvg's server step
halved) carries none and leaves the old files as they were."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedcompanion.experiments import ExperimentConfig, sweep
from fedcompanion.fingerprint import ROOT as PACKAGE

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


@pytest.mark.parametrize("edit", list(EDITS))
def test_rekey_carries_a_number_neutral_edit_and_refuses_one_that_moves_the_numbers(tmp_path, edit):
    results = tmp_path / "results"
    sweep(CONFIGS, results, jobs=1, progress=False)  # stored by this code: the one before the edit
    stored = sorted(p.name for p in results.iterdir())
    summary = results / "summaries" / "nb.json"  # a notebook that read both runs and one run of another code
    summary.parent.mkdir()
    listed = sorted([p.stem for p in results.glob("*.json")] + ["ffffffffffffffff"])
    summary.write_text(json.dumps({"notebook": "nb", "runs_read": listed}, indent=1, sort_keys=True) + "\n")
    now = tmp_path / "edited" / "src"
    shutil.copytree(PACKAGE, now / "fedcompanion", ignore=shutil.ignore_patterns("__pycache__"))
    fedavg = now / "fedcompanion" / "algorithms" / "fedavg.py"
    assert LINE in fedavg.read_text()
    fedavg.write_text(fedavg.read_text().replace(LINE, EDITS[edit]))
    (tmp_path / "work").mkdir()
    done = _python(now, "import sys; from pathlib import Path; from fedcompanion.rekey import rekey; "
                        f"sys.exit(rekey(Path({str(results)!r}), Path({str(PACKAGE.parent)!r}), "
                        f"Path({str(tmp_path / 'work')!r})))")
    log = done.stdout + done.stderr
    after = sorted(p.name for p in results.iterdir() if p.is_file())
    read = json.loads(summary.read_text())["runs_read"]
    if edit == "the step halved":
        assert done.returncode == 1 and "0 of 1 groups carried" in log, log
        assert after == stored and read == listed  # nothing renamed, nothing rewritten
        return
    assert done.returncode == 0 and "1 of 1 groups carried; 1 summaries" in log, log
    assert len(after) == len(stored) and set(after).isdisjoint(stored)  # every run under its new key
    assert read == sorted([p.stem for p in results.glob("*.json")] + ["ffffffffffffffff"])  # the summary follows
    current = _python(now, "import json; from pathlib import Path; from fedcompanion.verify import _stored, "
                           f"is_current; print(json.dumps([is_current(m) for m in _stored(Path({str(results)!r}))]))")
    assert json.loads(current.stdout) == [True, True], current.stderr
