"""The reproduction's wall times: ``<results>/summaries/_timings.json`` (each notebook's seconds, the whole run's
elapsed time and the machine that measured them, from an empty cache), and ``warm``: the same from the committed
results on a fresh clone (``python benchmarks/fresh_clone.py``: what `make html` costs a reader)."""
from __future__ import annotations

import json
from pathlib import Path

from ..infra.atomic import field as _field
from ..infra.atomic import read_json, write_atomic


def read_timings(results_dir: str | Path) -> dict:
    """``_timings.json``: the machine, each notebook's wall time and (after a full reproduction) its elapsed
    time and how many notebooks ran at once; ``since``, where written by hand, what the notebooks do now that the
    measurement did not (the next cold reproduction rewrites the file without it)."""
    path = Path(results_dir) / "summaries" / "_timings.json"
    if not path.exists():
        return {"notebooks": {}, "machine": "?"}
    data = read_json(path, "timings file")
    _field(data, "machine", (str,), path, default="?")
    for name in _field(data, "notebooks", (dict,), path, default={}):
        _field(data["notebooks"], name, (float,), path, where="notebooks")
    _field(data, "elapsed", (float, type(None)), path, default=None)
    _field(data, "parallel", (int, type(None)), path, default=None)
    _field(data, "pool", (str, type(None)), path, default=None)
    _field(data, "since", (str,), path, default="")  # what changed since the measurement (a cold run drops it)
    warm = _field(data, "warm", (dict,), path, default={})
    for name in _field(warm, "notebooks", (dict,), path, default={}, where="warm"):
        _field(warm["notebooks"], name, (float,), path, where="warm.notebooks")
    return data


def write_warm(results_dir: str | Path, seconds: dict[str, float], elapsed: float, site: float) -> None:
    """Record the notebooks' wall times from the committed results on a fresh clone (``seconds``), the whole
    execution's ``elapsed`` seconds and the site's build after it (``site``), with the machine."""
    data = read_timings(results_dir)
    data["warm"] = {"machine": machine(), "notebooks": {k: round(v, 1) for k, v in sorted(seconds.items())},
                    "elapsed": round(elapsed, 1), "site": round(site, 1)}
    path = Path(results_dir) / "summaries" / "_timings.json"
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def write_timings(results_dir: str | Path, timings: dict[str, float], *, elapsed: float | None = None,
                  parallel: int | None = None, pool: str | None = None, only: set[str] | None = None) -> None:
    """Merge notebook wall times (seconds) into ``_timings.json`` with a description of the machine; ``elapsed``
    (a whole reproduction, ``parallel`` notebooks at a time, its runs computed by ``pool``: ``None`` for each
    notebook's own processes, else the Dask scheduler, ``local`` for one cluster of this machine's cores) replaces
    the previous one. ``only``: keep the times of these names alone (a whole reproduction's notebooks: a name it no
    longer runs, such as a notebook now run as a part, does not keep an earlier reproduction's time)."""
    path = Path(results_dir) / "summaries" / "_timings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = read_timings(results_dir)
    notebooks = {**old.get("notebooks", {}), **{k: round(v, 1) for k, v in timings.items()}}
    if only is not None:
        notebooks = {k: v for k, v in notebooks.items() if k in only}
    data = {"machine": machine(), "notebooks": dict(sorted(notebooks.items()))}
    if elapsed is not None:
        data["elapsed"], data["parallel"], data["pool"] = round(elapsed, 1), parallel, pool
    elif "elapsed" in old:
        data["elapsed"], data["parallel"], data["pool"] = old["elapsed"], old.get("parallel"), old.get("pool")
    if old.get("warm"):  # a measurement of its own (benchmarks/fresh_clone.py), kept
        data["warm"] = old["warm"]
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def machine() -> str:
    """The machine, in one line, as the report names it."""
    from ..experiments import RUN_THREADS
    from ..infra.machine import describe

    return f"{describe()}, {RUN_THREADS} torch thread(s) per run and per notebook kernel"
