"""The machine a run's numbers come from: what, besides the config and the seed, decides their last bits.

On one machine every run is bit-reproducible. Across machines the same code gives different last bits, because the
kernels that compute a product or a softmax are chosen by the CPU's instruction set (MKL and PyTorch dispatch to
AVX2, AVX-512 or AMX code, each summing in its own order) and change with the torch and BLAS versions. So each
stored run records :func:`numerical_platform`, and ``make verify`` demands bit-identity only where the recomputing
machine is the same platform (:mod:`fedcompanion.reproduction.verify`).
"""
from __future__ import annotations

import contextlib
import functools
import os
import platform
import re

# CPU features that select a kernel in MKL, oneDNN or PyTorch's vectorised code
_ISA_FLAG = re.compile(r"^(sse4_2|avx\w*|fma|f16c|amx\w*)$")


def _cpu() -> tuple[str, str]:
    """(vendor, family and model; the vector instruction sets) from ``/proc/cpuinfo`` on Linux, else what Python
    knows and ``""``."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine(), ""
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    identity = [fields.get("vendor_id", platform.machine())]
    identity += [f"{key} {fields[key]}" for key in ("cpu family", "model") if key in fields]
    flags = sorted(f for f in fields.get("flags", "").split() if _ISA_FLAG.match(f))
    return " ".join(identity), " ".join(flags)


def _blas() -> str:
    """The BLAS torch was built with, with its version where torch's build information gives it."""
    import torch

    info = torch.__config__.show()
    for pattern in (r"Math Kernel Library Version ([\d.]+)", r"OpenBLAS ([\d.]+)"):
        found = re.search(pattern, info)
        if found:
            return ("MKL " if "Math" in pattern else "OpenBLAS ") + found.group(1)
    found = re.search(r"BLAS_INFO=(\w+)", info)
    return found.group(1) if found else "unknown"


@functools.cache
def numerical_platform() -> dict:
    """What the last bits of a run depend on besides its config: CPU (instruction sets included), the kernels
    PyTorch dispatches to, torch and BLAS versions. Equal dicts: the same bits for the same config."""
    import torch

    cpu, isa = _cpu()
    return {"cpu": cpu, "isa": isa, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "blas": _blas(), "system": f"{platform.system()} {platform.machine()}"}


def describe() -> str:
    """One line for reports: cores, CPU, kernels, Python and torch."""
    p = numerical_platform()
    return (f"{os.cpu_count()} CPU cores ({p['cpu']}; {p['cpu_capability']} kernels, {p['blas']}), "
            f"Python {platform.python_version()}, torch {p['torch']}")


# A problem with at most this many parameters runs on one torch thread by default: its products are too small to
# split (benchmarks/ceadmm.py: ICEADMM on 200 clients, n = 100, took 8.8-15.8 ms an iteration on two MKL threads of
# a loaded 2-core machine, 2.4-2.9 ms on one), and one thread is what every run of a sweep uses.
SMALL_PROBLEM = 4096


def default_threads(num_params: int) -> int | None:
    """Torch threads for a run of a model with ``num_params`` parameters: one for a small problem, else ``None``
    (torch's setting, the machine's cores unless the caller set it)."""
    return 1 if num_params <= SMALL_PROBLEM else None


@contextlib.contextmanager
def torch_threads(threads: int | None):
    """Run the block on ``threads`` torch threads (``None``: as set), and give the process its count back after:
    a run leaves no thread setting behind."""
    import torch

    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
