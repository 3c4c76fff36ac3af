import pytest
import torch

from fedcompanion.experiments import RUN_THREADS
from fedcompanion.reproduction.notebook import resolve_parameters
from fedcompanion.validation import ConfigError

SMOKE = dict(rounds=2, lr=0.1, seeds=[0], refresh=False, results_dir="build/x")


@pytest.fixture(autouse=True)
def _keep_threads():
    """resolve_parameters sets the process's torch threads: give the other tests theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_notebooks_compute_with_the_runs_thread_count():
    """A notebook's own computations use RUN_THREADS threads whatever the machine (their float32 numbers would
    otherwise depend on the core count and on how many notebooks run at a time)."""
    torch.set_num_threads(RUN_THREADS + 1)
    resolve_parameters("paper", SMOKE, rounds=200, lr=0.05, seeds=[0], refresh=False, results_dir="r")
    assert torch.get_num_threads() == RUN_THREADS


def test_smoke_profile_replaces_values():
    p = resolve_parameters("smoke", SMOKE, rounds=200, lr=0.05, seeds=[0, 1, 2], refresh=False, results_dir="r")
    assert (p.rounds, p.lr, p.seeds) == (2, 0.1, [0])
    p = resolve_parameters("paper", SMOKE, rounds=200, lr=1, seeds=[0, 1, 2], refresh=True, results_dir="r")
    assert (p.rounds, p.lr, p.refresh) == (200, 1, True)  # an int is fine for a float


@pytest.mark.parametrize("name,value,match", [
    ("rounds", "10", "'rounds' must be an int, got '10'"),
    ("rounds", 2.5, "'rounds' must be an int"),
    ("lr", "0.1", "'lr' must be a number"),
    ("refresh", 1, "'refresh' must be a bool"),
    ("seeds", 3, "'seeds' must be a list"),
])
def test_wrong_types_are_named(name, value, match):
    given = dict(rounds=200, lr=0.05, seeds=[0], refresh=False, results_dir="r") | {name: value}
    with pytest.raises(ConfigError, match=match):
        resolve_parameters("paper", SMOKE, **given)


def test_unknown_profile():
    with pytest.raises(ConfigError, match="'profile' must be one of"):
        resolve_parameters("fast", SMOKE)


def test_parameters_reads_the_notebooks_namespace_in_one_line():
    from fedcompanion.reproduction.notebook import parameters

    namespace = dict(profile="paper", rounds=200, lr=0.05, seeds=[0, 1], refresh=False, results_dir="r", other=1)
    p = parameters(namespace, SMOKE)
    assert (p.rounds, p.lr, p.seeds, p.profile) == (200, 0.05, [0, 1], "paper") and not hasattr(p, "other")
    assert parameters(namespace | {"profile": "smoke"}, SMOKE).rounds == 2
    with pytest.raises(ConfigError, match=r"names \['lr'\], which the notebook's parameters cell does not define"):
        parameters({k: v for k, v in namespace.items() if k != "lr"}, SMOKE)
    with pytest.raises(ConfigError, match="'rounds' must be an int"):
        parameters(namespace | {"rounds": "10"}, SMOKE)


def test_a_misspelled_papermill_parameter_is_named_not_ignored():
    """Issue 28: `papermill -p rouns 10` used to run the defaults without a word."""
    from fedcompanion.reproduction.notebook import parameters

    namespace = {"profile": "paper", "rounds": 5, "In": ["", "profile = 'paper'\nrounds = 5",
                                                        "# Parameters\nrouns = 10\n", "import fedcompanion"]}
    with pytest.raises(ConfigError, match=r"notebook parameter 'rouns' is not one of this notebook's parameters "
                                          r"\['profile', 'rounds'\]"):
        parameters(namespace, smoke=dict(rounds=1))
    namespace["In"][2] = "# Parameters\nrounds = 5\nprofile = 'paper'\n"  # declared names pass
    assert parameters(namespace, smoke=dict(rounds=1)).rounds == 5


def _kernel(parameters_cell: str, injected: str = "", **values) -> dict:
    """A notebook kernel's namespace after its parameters cell (and papermill's injected cell) ran."""
    cells = ["", parameters_cell] + ([injected] if injected else []) + ["import fedcompanion"]
    namespace: dict = {}
    for source in cells[1:3]:
        exec(source, namespace)
    namespace.pop("__builtins__", None)
    return namespace | values | {"In": cells}


CELL = "profile = 'paper'\nrounds = 200\nlr = 0.05\nseeds = [0, 1, 2]"


def test_the_smoke_profile_lists_only_what_it_changes():
    """The parameters and their types come from the parameters cell; the smoke dict names only its changes."""
    from fedcompanion.reproduction.notebook import parameters

    p = parameters(_kernel(CELL), smoke=dict(rounds=2))
    assert (p.rounds, p.lr, p.seeds) == (200, 0.05, [0, 1, 2])
    p = parameters(_kernel(CELL.replace("'paper'", "'smoke'")), smoke=dict(rounds=2))
    assert (p.rounds, p.lr, p.seeds) == (2, 0.05, [0, 1, 2])
    with pytest.raises(ConfigError, match=r"the smoke profile names \['rouns'\]"):
        parameters(_kernel(CELL), smoke=dict(rouns=2))
    with pytest.raises(ConfigError, match="the smoke value of 'rounds' must be an int"):
        parameters(_kernel(CELL), smoke=dict(rounds=2.5))
    with pytest.raises(ConfigError, match="'lr' must be a number"):  # the type is the parameters cell's
        parameters(_kernel(CELL, "# Parameters\nlr = '0.1'\n"), smoke=dict(rounds=2))


def test_a_value_given_by_name_is_never_replaced_by_the_smoke_profile():
    """`papermill -p profile smoke -p rounds 7` runs 7 rounds: the smoke profile fills in only what nobody asked
    for (it used to replace every value it listed, silently)."""
    from fedcompanion.reproduction.notebook import parameters

    injected = "# Parameters\nprofile = 'smoke'\nrounds = 7\n"
    p = parameters(_kernel(CELL, injected), smoke=dict(rounds=2, seeds=[0]))
    assert (p.rounds, p.seeds, p.profile) == (7, [0], "smoke")


def test_a_kernel_without_input_history_reads_the_literal_globals():
    """nbval executes cells without storing them in ``In``: the parameters are then the globals holding literals
    (the CI run of 122fd17c failed 163 nbval cells before this)."""
    from fedcompanion.reproduction.notebook import parameters

    namespace = {"In": [""], "Out": {}, "profile": "smoke", "rounds": 200, "lr": 0.05, "results_dir": "r",
                 "np": __import__("numpy"), "_hidden": 3}
    p = parameters(namespace, smoke=dict(rounds=2))
    assert (p.rounds, p.lr, p.results_dir) == (2, 0.05, "r") and not hasattr(p, "np") and not hasattr(p, "_hidden")


def _papermill_misses(source: str, caplog) -> tuple[set, list]:
    """The parameters a cell assigns (as :func:`fedcompanion.reproduction.notebook.parameters_cell` reads them) that
    papermill's parser does not list, and what it logged while parsing."""
    import logging

    from papermill.translators import PythonTranslator

    from fedcompanion.reproduction.notebook import parameters_cell

    with caplog.at_level(logging.WARNING):
        caplog.clear()
        listed = {p.name for p in PythonTranslator.inspect({"source": source})}
        logged = [r.getMessage() for r in caplog.records]
    return set(parameters_cell([source])) - listed, logged


def test_papermill_reads_every_parameter_of_every_notebook(caplog):
    """papermill lists a notebook's parameters (``papermill --help-notebook``, and the names it may inject) by
    parsing the parameters cell line by line; a line it cannot parse (an ``=`` inside a comment did it) is logged
    and left out, so that parameter would be missing from its help. Every parameter must be listed."""
    import json

    from fedcompanion.reproduction.reproduce import notebooks

    for path in notebooks():
        cells = json.loads(path.read_text())["cells"]
        cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
        assert _papermill_misses("".join(cell["source"]), caplog) == (set(), []), path.name


def test_papermill_parameter_check_can_fail(caplog):
    """The check above on a cell like the one that slipped through: it names the dropped parameter."""
    missed, logged = _papermill_misses("profile = 'paper'\nrounds = 2\npenalty = 0.2  # sigma = c w r\n", caplog)
    assert missed == {"penalty"} and "Unable to parse line 3" in " ".join(logged)
