"""Every notebook runs end to end under papermill with the smoke profile.

The executed copies land in ``build/executed/``, their runs and computed records in ``build/test-results/``, emptied
first, so that every run is computed once, as `make reproduce` computes it from an empty cache. ``make test`` then
re-runs the copies with nbval, reading those runs, and requires the outputs marked ``# NBVAL_CHECK_OUTPUT`` to come
out identical (the notebooks' analysis is deterministic), and recomputes one run of every method from scratch
(``verify --subset methods``: the runs are).
"""
import os
import shutil

import pytest

from fedcompanion.reproduction.reproduce import ROOT, default_parallel, execute, kernel_threads, notebooks

SMOKE = {"profile": "smoke", "refresh": False, "results_dir": "build/test-results",
         "figures_dir": "build/test-figures"}


def _executed_copy(notebook):
    return ROOT / "build" / "executed" / notebook.relative_to(ROOT / "notebooks")


@pytest.fixture(scope="module")
def smoke_runs(request):
    """Every selected notebook executed under papermill with the smoke profile once, as `make reproduce` executes
    them: as many at a time as the machine has cores (two on two), in kernels of their own, each with its share of
    the threads. Maps each notebook to the error it raised (None: it ran)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    from fedcompanion.reproduction.reproduce import _execute_timed

    todo = [item.callspec.params["notebook"] for item in request.session.items
            if item.originalname == "test_notebook_runs_with_smoke_profile"]
    cpus = os.cpu_count() or 1
    parallel = min(default_parallel(cpus), len(todo))
    outcome = {}
    if todo:  # from an empty cache: nothing a former session stored is read
        shutil.rmtree(ROOT / SMOKE["results_dir"], ignore_errors=True)
    with ProcessPoolExecutor(parallel, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_execute_timed, nb, _executed_copy(nb), SMOKE, False, kernel_threads(parallel, cpus)):
                   nb for nb in todo}
        for future in as_completed(futures):
            outcome[futures[future]] = future.exception()
    return outcome


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", notebooks(), ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_notebook_runs_with_smoke_profile(notebook, smoke_runs):
    if smoke_runs[notebook] is not None:
        raise smoke_runs[notebook]
    out = _executed_copy(notebook)
    assert out.exists()
    import nbformat  # issue 46: the notebook shows its verdicts (record's output), not a path

    shown = [o.get("data", {}).get("text/markdown", "") for c in nbformat.read(out, 4).cells
             if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any(text.startswith("**Verdicts**") for text in shown), notebook
    printed = "".join("".join(o.get("text", "")) for c in nbformat.read(out, 4).cells if c.cell_type == "code"
                      for o in c.get("outputs", []))
    warned = [line for line in printed.splitlines() if "OverlappingTextWarning" in line]
    assert not warned, f"{notebook}: a figure draws text over text: {warned[0]}"


@pytest.mark.notebook
@pytest.mark.parametrize("stem", ["03_adafedadam", "04_fairness_front"])
def test_make_reproduces_part_of_a_notebook_runs_and_records_under_the_parts_name(stem, tmp_path, smoke_runs):
    """`make reproduce` runs AdaFedAdam's notebooks 3 and 4 with ``settings=["B"]`` (setting A: `make setting-a`):
    the part must run, record under its own name, claim nothing from A, and compute no run that the whole notebook
    did not: it reads a copy of the whole's smoke runs (those its smoke test stored in this pytest run, else the whole
    is run first). Wrong: a part that still runs A, or whose B differs from the whole's."""
    import json
    import shutil

    from fedcompanion.reproduction.reproduce import PART_IN_REPRODUCE

    name, selection = PART_IN_REPRODUCE[stem]
    notebook = ROOT / "notebooks" / "adafedadam" / f"{stem}.ipynb"
    results = tmp_path / "results"
    if smoke_runs.get(notebook, "not run") is None:  # the whole ran in this session: its runs are in the smoke cache
        shutil.copytree(ROOT / SMOKE["results_dir"], results, ignore=shutil.ignore_patterns("summaries"))
    else:
        execute(notebook, tmp_path / "whole.ipynb", {**SMOKE, "results_dir": str(results),
                                                     "figures_dir": str(tmp_path)}, progress=False)
    stored = sorted(path.name for path in results.glob("*.json"))
    params = {**SMOKE, **selection, "refresh": False, "results_dir": str(results), "figures_dir": str(tmp_path)}
    execute(notebook, tmp_path / "out.ipynb", params, progress=False)
    summary = json.loads((results / "summaries" / (name.replace("/", "--") + ".json")).read_text())
    assert summary["notebook"] == name and summary["claims"]
    settings = {e["setting"][0] for c in summary["claims"] for e in c["evidence"] if e["kind"] != "untestable"}
    assert settings == {"B"}, settings
    assert not list(tmp_path.glob("adafedadam_setting_a*")) and summary["runs_read"]
    assert sorted(path.name for path in results.glob("*.json")) == stored  # every run of the part is the whole's


@pytest.mark.notebook
def test_wrong_parameter_type_is_named(tmp_path):
    import papermill

    with pytest.raises(papermill.PapermillExecutionError, match="'rounds' must be an int, got '10'"):
        execute(ROOT / "notebooks" / "00_tour.ipynb", tmp_path / "bad.ipynb", {"rounds": "10"}, progress=False)


@pytest.mark.notebook
def test_diverged_runs_are_listed_and_averaged_into_nothing(tmp_path):
    """adafedadam/02 at server_lr 1000: every run diverges; the notebook used to average them into its mean curve
    and speed-ups, and its summary listed none."""
    import json

    params = {"profile": "paper", "server_lr": 1000.0, "accumulations": [1, 2], "seeds": [0], "rounds": 6,
              "targets": [0.5], "jobs": 1, "results_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path)}
    execute(ROOT / "notebooks" / "adafedadam" / "02_accumulated_adam.ipynb", tmp_path / "out.ipynb", params,
            progress=False)
    summary = json.loads((tmp_path / "results" / "summaries" / "adafedadam--02_accumulated_adam.json").read_text())
    assert sorted((d["label"], d["seed"]) for d in summary["diverged"]) == [("N=1", 0), ("N=2", 0)]
    printed = "".join("".join(o.get("text", "")) for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"]
                      for o in c.get("outputs", []))
    assert "2 runs, 2 diverged" in printed


@pytest.mark.notebook
def test_a_notebook_runs_over_ipc_and_its_kernel_prints_no_tcp_warning(tmp_path, capfd):
    """Issue 45: every kernel of a reproduction printed "Kernel is running over TCP without encryption"."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
                                         nbformat.v4.new_code_cell("print(x + 1)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "tiny.ipynb")
    execute(tmp_path / "tiny.ipynb", tmp_path / "out.ipynb", {"x": 41}, progress=False)
    assert nbformat.read(tmp_path / "out.ipynb", 4).cells[-1].outputs[0]["text"] == "42\n"
    assert "running over TCP" not in capfd.readouterr().err


def test_a_finished_notebooks_kernel_is_shut_down_without_an_interrupt():
    """jupyter_client sends SIGINT before its shutdown request; ipykernel then logged "KeyboardInterrupt caught in
    kernel" into `make reproduce`'s log. Wrong: interrupting while shutting down; refusing an interrupt otherwise
    (nbclient's cell timeout needs it)."""
    import asyncio

    from fedcompanion.reproduction.reproduce import ipc_kernel_manager

    sent = []
    manager = ipc_kernel_manager()()

    async def signal(signum):
        sent.append(signum)

    manager._async_signal_kernel = signal
    manager.provisioner = type("Provisioner", (), {"has_process": True})()  # a running kernel
    manager._kernel_spec = type("Spec", (), {"interrupt_mode": "signal"})()
    manager.shutting_down = True
    asyncio.run(manager._async_interrupt_kernel())
    assert sent == []
    manager.shutting_down = False
    asyncio.run(manager._async_interrupt_kernel())
    assert len(sent) == 1
