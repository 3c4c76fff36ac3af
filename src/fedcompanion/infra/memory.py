"""Large CPU tensors without page faults: glibc's malloc keeps freed blocks for reuse.

glibc serves every block above its mmap threshold with a fresh ``mmap`` and gives it back to the system when it
is freed. The threshold adapts to the blocks a program frees, but never above 32 MiB, so every new [K, P]
tensor of a round with many clients (40 MB for 50 clients of the MNIST MLP 784-200-200-10, 80 MB for 100) is
mapped anew and the kernel zeroes and maps its pages one by one when it is first written: a fresh [100, 200000]
float32 product ``x * 2.0`` took about 17 ms against 4 ms for the same product into an existing tensor on this
project's current 2-core machine (about 50 ms against 12 ms on its previous one; ``python -m fedcompanion.infra.memory``
measures it). :func:`reuse_freed_memory` raises the
mmap threshold (and the trim threshold, above which a heap's free top is given back) to 1 GiB, so such blocks
come from the heap and a freed one is reused by the next. This is what PyTorch's caching allocator does on
GPUs; the price is the same: the process keeps the memory it freed (its resident size stays near its peak).

:func:`fedcompanion.run` calls it once per process. It changes where memory comes from, never the arithmetic
(``make reproduce`` gives every run bit for bit the same history with and without it). Set the environment
variable ``FEDCOMPANION_SYSTEM_MALLOC=1`` to keep glibc's defaults; elsewhere than glibc (macOS, Windows,
musl) it does nothing.
"""
from __future__ import annotations

import ctypes
import os
import platform

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, from glibc's malloc.h
KEEP_BELOW = 1 << 30  # blocks below 1 GiB come from the heap; up to 1 GiB of free heap top is kept
OPT_OUT = "FEDCOMPANION_SYSTEM_MALLOC"
_applied: bool | None = None  # the outcome of the first call in this process (None: not called yet)


def reuse_freed_memory() -> bool:
    """Ask glibc's malloc to serve blocks below 1 GiB from its heap and keep freed ones for reuse (once per
    process). Returns whether the setting is in effect: ``False`` off glibc or with ``FEDCOMPANION_SYSTEM_MALLOC``
    set to anything but ``""`` or ``"0"``."""
    global _applied
    if _applied is None:
        _applied = False
        if os.environ.get(OPT_OUT, "") in ("", "0") and platform.libc_ver()[0] == "glibc":
            libc = ctypes.CDLL(None)
            _applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, KEEP_BELOW)) and bool(
                libc.mallopt(_M_TRIM_THRESHOLD, KEEP_BELOW))
    return _applied


def _fresh_versus_reused(rows: int = 100, cols: int = 200_000, repeats: int = 20) -> tuple[float, float]:
    """Milliseconds of ``x * 2.0`` into a fresh tensor and into an existing one (medians of ``repeats``)."""
    import time

    import torch

    x, out = torch.randn(rows, cols), torch.empty(rows, cols)

    def median_ms(step) -> float:
        for _ in range(3):
            step()
        times = []
        for _ in range(repeats):
            tic = time.perf_counter()
            step()
            times.append(time.perf_counter() - tic)
        return 1e3 * sorted(times)[repeats // 2]

    return median_ms(lambda: x * 2.0), median_ms(lambda: torch.mul(x, 2.0, out=out))


if __name__ == "__main__":
    before = _fresh_versus_reused()
    applied = reuse_freed_memory()
    after = _fresh_versus_reused()
    print(f"[100, 200000] float32 x * 2.0: fresh {before[0]:.1f} ms, into an existing tensor {before[1]:.1f} ms "
          f"(glibc defaults); after reuse_freed_memory() (in effect: {applied}): fresh {after[0]:.1f} ms, "
          f"existing {after[1]:.1f} ms")
