"""The on-disk results cache: a run's files, written atomically and verified when read.

A run's key's SHA-256 (:meth:`ExperimentConfig.hash`) names its files in the results folder:

* ``<hash>.csv.gz``: the tidy history (``round, client, metric, value``);
* ``<hash>.pt``: the final global model, only with ``save_params=True`` (``torch.save``; load it with
  ``weights_only=True``);
* ``<hash>.json``: config (its key), status, timings, the machine's numerical platform
  (:func:`~fedcompanion.infra.machine.numerical_platform`), and the SHA-256 and size of the other two, written last,
  with ``record``: the SHA-256 of the fields a reader acts on (config, label, status, diverged round, the two digests,
  platform, wall time and timings), so that an edited status (which decides whether a figure averages the run) or
  an edited CPU time (which the CPU-time verdicts read) is caught like an edited history.

Every file is written atomically (temp file, then rename). Loading verifies the JSON, the digests, the row
count and the tensor shape; any mismatch warns, naming the file, and the run is recomputed.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import warnings
from pathlib import Path

import pandas as pd
import torch

from ..infra.atomic import write_atomic
from ..infra.machine import numerical_platform
from ..protocol import RunResult
from ..validation import ConfigError
from .config import ExperimentConfig, key_hash
from .runner import RUN_THREADS


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


VOUCHED = ("config", "label", "status", "diverged_round", "history", "params", "platform", "wall_time", "timing")


def record_digest(meta: dict, fields: tuple[str, ...] = VOUCHED) -> str:
    """SHA-256 of the canonical JSON of the record's ``fields`` (a run's: ``VOUCHED``)."""
    return _sha256(json.dumps({k: meta.get(k) for k in fields}, sort_keys=True, default=list).encode())


def _history_bytes(history: pd.DataFrame) -> bytes:
    text = history.to_csv(index=False).encode()
    return gzip.compress(text, compresslevel=6, mtime=0)  # mtime 0: the same history gives the same bytes


def store(config: ExperimentConfig, result: RunResult, results_dir: str | Path, key: dict | None = None,
          platform: dict | None = None) -> None:
    """Write a run's files (history, optional model, then the JSON that vouches for them). Only a whole run is
    stored: ``ok``, ``converged`` (the ADMM family met its stopping tolerance) or ``diverged``; a ``partial``
    one (a Flower run that lost clients) would be served later as the config's full run, so it is refused.
    ``key``: the config's key as the process that asked for the run computed it (a sweep's parent: a worker
    cannot always compute it, e.g. for an algorithm defined in the parent's ``__main__``). ``platform``: the
    numerical platform of the process that computed the run (a worker's; default: this process's)."""
    if result.status not in ("ok", "converged", "diverged"):
        raise ValueError(f"a run with status {result.status!r} is not what its config describes: not stored")
    folder = Path(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    key = config.key() if key is None else key
    h = key_hash(key)
    history = _history_bytes(result.history)
    write_atomic(folder / f"{h}.csv.gz", history)
    params = None
    if config.save_params:
        buffer = io.BytesIO()
        torch.save(result.params.detach().cpu(), buffer)
        write_atomic(folder / f"{h}.pt", buffer.getvalue())
        params = {"sha256": _sha256(buffer.getvalue()), "shape": list(result.params.shape)}
    timing = None if result.timing is None else result.timing.to_dict(orient="list")
    meta = {"config": key, "label": config.label, "status": result.status,
            "diverged_round": result.diverged_round, "wall_time": result.wall_time, "timing": timing,
            "history": {"sha256": _sha256(history), "rows": len(result.history)}, "params": params,
            "threads": RUN_THREADS, "platform": platform or numerical_platform()}
    meta["record"] = record_digest(meta)
    write_atomic(folder / f"{h}.json", json.dumps(meta, indent=1).encode())


class CacheMiss(Exception):
    """A run's files are absent, or present but not what their JSON vouches for (the message says which)."""


def read_history(path: Path, expected: dict) -> pd.DataFrame:
    """The history in ``path`` if it is what its JSON vouches for (``expected``: its ``history`` entry, the sha256 and
    row count); raises :class:`CacheMiss` naming the file otherwise."""
    if not path.exists():
        raise CacheMiss(f"{path} is missing")
    if not path.is_file():  # a FIFO would block the read: a stored history is a plain file
        raise CacheMiss(f"{path} is not a regular file")
    data = path.read_bytes()
    if _sha256(data) != expected.get("sha256"):
        raise CacheMiss(f"{path} does not match its recorded digest (truncated or edited?)")
    history = pd.read_csv(io.BytesIO(data), compression="gzip")
    if len(history) != expected.get("rows") or list(history.columns) != ["round", "client", "metric", "value"]:
        raise CacheMiss(f"{path} does not have the recorded rows and columns")
    return history


def _load(config: ExperimentConfig, folder: Path, with_params: bool = False):
    """(history, meta[, params]) of a cached run; raises :class:`CacheMiss`."""
    h = config.hash()
    meta_path, history_path, params_path = folder / f"{h}.json", folder / f"{h}.csv.gz", folder / f"{h}.pt"
    if not meta_path.exists():
        raise CacheMiss("")
    try:
        meta = json.loads(meta_path.read_text())
        expected = meta["history"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CacheMiss(f"{meta_path} is not a valid results record ({type(exc).__name__})") from exc
    if meta.get("config") != json.loads(json.dumps(config.key(), default=list)):
        raise CacheMiss(f"{meta_path} describes another config")
    if not isinstance(expected, dict):
        raise CacheMiss(f"{meta_path} is not a valid results record (history)")
    if meta.get("record") != record_digest(meta):
        raise CacheMiss(f"{meta_path} does not match its record digest (its status or another field was edited?)")
    history = read_history(history_path, expected)
    if not with_params:
        return history, meta
    if meta.get("params") is None:
        raise CacheMiss(f"{meta_path}: this run was stored without its model (set save_params=True)")
    if not params_path.exists():
        raise CacheMiss(f"{params_path} is missing")
    blob = params_path.read_bytes()
    if _sha256(blob) != meta["params"].get("sha256"):
        raise CacheMiss(f"{params_path} does not match its recorded digest")
    params = torch.load(io.BytesIO(blob), weights_only=True)
    if not isinstance(params, torch.Tensor) or list(params.shape) != meta["params"].get("shape"):
        raise CacheMiss(f"{params_path} does not hold a tensor of the recorded shape")
    return history, meta, params


def is_cached(config: ExperimentConfig, results_dir: str | Path, with_params: bool = False) -> bool:
    """Whether a verified result of ``config`` is in ``results_dir`` (warns, naming the file, if one is there
    but fails verification)."""
    try:
        _load(config, Path(results_dir), with_params or config.save_params)
        return True
    except CacheMiss as miss:
        if str(miss):
            warnings.warn(f"{miss}; the run will be recomputed", stacklevel=2)
        return False


# The hashes of the runs this process has read (load_result, load_params): a notebook's summary lists them
# (claims.record), so that a stored run no notebook reads can be found (python -m fedcompanion.reproduction.prune).
_READ: set[str] = set()


def note_read(name: str) -> None:
    """Count ``name`` (a run's hash, or a cached computation's) as read by this process."""
    _READ.add(name)


def take_read_runs() -> list[str]:
    """The hashes of the runs read since the last call, sorted; forgets them."""
    out = sorted(_READ)
    _READ.clear()
    return out


def load_result(config: ExperimentConfig, results_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """(history, metadata) of a cached run (``ConfigError`` if it is not there or fails verification)."""
    try:
        _READ.add(config.hash())
        return _load(config, Path(results_dir))
    except CacheMiss as miss:
        reason = str(miss) or "not run yet"
        raise ConfigError(f"no verified result for {config.label or config.hash()}: {reason}") from None


def load_params(config: ExperimentConfig, results_dir: str | Path) -> torch.Tensor:
    """The final global model of a cached run stored with ``save_params=True``."""
    try:
        _READ.add(config.hash())
        return _load(config, Path(results_dir), with_params=True)[2]
    except CacheMiss as miss:
        reason = str(miss) or "not run yet"
        raise ConfigError(f"no verified model for {config.label or config.hash()}: {reason}") from None
