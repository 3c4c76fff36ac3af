"""Locating the shipped data files and verifying them against ``data/SHA256SUMS``."""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

DATA_ENV = "FEDCOMPANION_DATA"


class DataError(RuntimeError):
    """A data file is missing, corrupted, or cannot be downloaded."""


def data_dir() -> Path:
    """The folder holding the shipped data: ``$FEDCOMPANION_DATA`` or the repository's ``data/``."""
    if DATA_ENV in os.environ:
        return Path(os.environ[DATA_ENV])
    return Path(__file__).resolve().parents[3] / "data"


def cache_dir() -> Path:
    """A writable, git-ignored folder for downloads (torchvision datasets that are not shipped)."""
    root = Path(os.environ.get("FEDCOMPANION_CACHE", data_dir().parent / "build" / "cache"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _checksums(folder: Path) -> dict[str, str]:
    sums = folder / "SHA256SUMS"
    if not sums.exists():
        raise DataError(f"{sums} is missing; restore it with `git checkout -- data/SHA256SUMS`.")
    stat = sums.stat()
    return dict(_listed(sums, stat.st_mtime_ns, stat.st_size))


@functools.cache
def _listed(sums: Path, mtime_ns: int, size: int) -> tuple[tuple[str, str], ...]:
    """(name, SHA-256) pairs of a SHA256SUMS file, read once per version of it (every run's key asks)."""
    pairs = (line.split() for line in sums.read_text().splitlines() if line.strip())
    return tuple((name, digest) for digest, name in pairs)


@functools.cache
def _verified(path: Path, expected: str, mtime: float) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise DataError(
            f"{path} is corrupted (sha256 {digest[:12]}..., expected {expected[:12]}...). "
            "Restore it with `git checkout -- data/` (or copy it again from the release)."
        )


def reads(*relatives: str):
    """Declare the shipped files a loader or task builder reads (``fn.data_files``): their checksums, as listed in
    the data folder in use, are part of the key of every run built from it, so data swapped under
    ``$FEDCOMPANION_DATA`` (its SHA256SUMS updated to match) is never served the shipped data's results."""
    def declare(fn):
        fn.data_files = tuple(sorted({*getattr(fn, "data_files", ()), *relatives}))
        return fn
    return declare


def checksums(relatives) -> dict[str, str]:
    """``relative -> SHA-256`` of the named shipped files, as the data folder in use lists them (``missing`` for a
    file it does not list: the run would fail on it anyway)."""
    listed = _checksums(data_dir()) if relatives else {}
    return {r: listed.get(r, "missing") for r in sorted(relatives)}


def verified_path(relative: str) -> Path:
    """Return the path of a shipped file after checking its SHA-256 (checked once per process)."""
    folder = data_dir()
    path = folder / relative
    expected = _checksums(folder).get(relative)
    if expected is None:
        raise DataError(f"{relative} is not listed in {folder / 'SHA256SUMS'}.")
    if not path.exists():
        raise DataError(
            f"data file {path} is missing. Restore it with `git checkout -- data/`, or point "
            f"${DATA_ENV} at a folder holding the project's data/ layout."
        )
    _verified(path, expected, path.stat().st_mtime)
    return path
