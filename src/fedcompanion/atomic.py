"""One way to write a file: to a temporary file beside it, then renamed over it, so a reader sees the old file or
the new one, never half of one (an interrupted run leaves at most a ``.<name>.*.tmp``, which :func:`clean_torn`
removes)."""
from __future__ import annotations

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
