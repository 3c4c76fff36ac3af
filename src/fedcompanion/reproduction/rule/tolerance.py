"""When a notebook's new summary is the result already stored: equal but for the last digits of its numbers.

Re-executing a notebook on another CPU recomputes what is not cached (an identity's residual, a float64 solve) and
its last bits move: a residual of 5.6e-17 becomes 1.1e-16. Such a summary is the stored result
again, and :func:`fedcompanion.reproduction.claims.record.record` leaves the stored file as it is (reading a notebook
must not modify the paper artifact); anything else is written, and :func:`moved` names what changed. The same result
means: the same structure, the same text and flags, and every number within

    |a - b| <= RTOL * max(|a|, |b|) + ATOL

(a number printed inside a text too: a printed 0.0873 that becomes 0.0874 has moved, and the file is written). The
list of runs a notebook read is compared exactly.
"""
from __future__ import annotations

import math
import re

RTOL, ATOL = 1e-9, 1e-12
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= RTOL * max(abs(a), abs(b)) + ATOL


def _same_text(a: str, b: str) -> bool:
    if a == b:
        return True
    if _NUMBER.split(a) != _NUMBER.split(b):
        return False
    pairs = list(zip(_NUMBER.findall(a), _NUMBER.findall(b)))
    return all(_close(float(x), float(y)) for x, y in pairs)


def moved(old, new, path: str = "", exact: tuple[str, ...] = ("runs_read",)) -> list[str]:
    """Where summary data ``new`` is not ``old`` within the tolerance: the paths (``claims[2].evidence[0].values``),
    empty for the same result. Fields named in ``exact`` must be equal."""
    if isinstance(old, dict) and isinstance(new, dict):
        if set(old) != set(new):
            return [path or "(the fields)"]
        return [p for key in sorted(old) for p in (
            ([] if old[key] == new[key] else [f"{path}.{key}".lstrip(".")]) if key in exact
            else moved(old[key], new[key], f"{path}.{key}".lstrip("."), exact))]
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [path]
        return [p for k, (a, b) in enumerate(zip(old, new)) for p in moved(a, b, f"{path}[{k}]", exact)]
    if isinstance(old, bool) or isinstance(new, bool):
        return [] if old is new else [path]
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return [] if _close(float(old), float(new)) else [path]
    if isinstance(old, str) and isinstance(new, str):
        return [] if _same_text(old, new) else [path]
    return [] if old == new else [path]
