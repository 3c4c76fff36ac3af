"""One way to write a file: to a temporary file beside it, then renamed over it, so a reader sees the old file or
the new one, never half of one (an interrupted run leaves at most a ``.<name>.*.tmp``, which :func:`clean_torn`
removes). And one way to read a bookkeeping file back (:func:`read_json`, :func:`field`): a file damaged by hand, by
a merge or by a copy is refused with its path and what is wrong, never a traceback deep in a library."""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically, readable by everyone (mode 644)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; results are meant to be shared
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def clean_torn(folder: str | Path, older_than: float = 600.0) -> list[Path]:
    """Remove the temporary files that interrupted writes left in ``folder`` (those older than ``older_than``
    seconds: a write takes milliseconds, and another process may be writing into the same folder now)."""
    now = time.time()
    torn = [p for p in Path(folder).glob(".*.tmp") if p.is_file() and now - p.stat().st_mtime > older_than]
    for p in torn:
        p.unlink(missing_ok=True)
    return torn


class DamagedFile(ValueError):
    """A file the project wrote is not what it writes: the message names the file and what is wrong."""


def read_json(path: str | Path, what: str):
    """The JSON document in ``path`` (``what`` it is, for the message), or :class:`DamagedFile` naming the file
    when it is not UTF-8, holds merge-conflict markers or is not valid JSON (e.g. cut short)."""
    path = Path(path)
    if not path.is_file():  # a FIFO or a device would block or never end: a project file is a regular file
        raise DamagedFile(f"{path}: the {what} is not a regular file; the project writes plain files: remove it")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedFile(f"{path}: the {what} is not UTF-8 text (byte {exc.start}); the project writes UTF-8 "
                          "JSON, so it was re-encoded or replaced: restore it, or delete it and run again") from None
    if text.startswith("<<<<<<< ") or "\n<<<<<<< " in text:
        raise DamagedFile(f"{path}: the {what} holds merge-conflict markers (<<<<<<<); resolve the conflict, or "
                          "delete it and run again")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DamagedFile(f"{path}: the {what} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                          f"{exc.colno}; {len(text)} characters): it may have been cut short; restore it, or "
                          "delete it and run again") from None


_KIND_NAMES = {dict: "a mapping", list: "a list", str: "text", int: "an integer", float: "a number",
               bool: "true or false", type(None): "null"}


def field(document, name: str, kinds: tuple, path: str | Path, *, default=..., where: str = ""):
    """``document[name]`` if it is one of ``kinds`` (``float`` admits integers; ``bool`` is no number), else
    :class:`DamagedFile` naming ``path`` and the field (``where`` says inside what). A missing field takes
    ``default`` where one is given."""
    label = f"{where}.{name}" if where else name
    if not isinstance(document, dict):
        raise DamagedFile(f"{path}: {where or 'the document'} should be a mapping, got {repr(document)[:80]}")
    if name not in document:
        if default is not ...:
            return default
        raise DamagedFile(f"{path}: the field {label!r} is missing")
    value = document[name]
    numeric = float in kinds and isinstance(value, int) and not isinstance(value, bool)
    if not numeric and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
        names = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
        raise DamagedFile(f"{path}: the field {label!r} should be {names}, got {repr(value)[:80]}")
    return value
