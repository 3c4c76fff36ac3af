"""fedcompanion.infra.memory: glibc's malloc serves large tensors from its heap once ``reuse_freed_memory`` is in
effect."""
import ctypes
import platform

import pytest
import torch

from fedcompanion.infra import memory

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt and mallinfo2 are glibc's")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mmapped_bytes() -> int:
    """Bytes malloc currently holds in mmapped blocks (glibc's mallinfo2().hblkhd)."""
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _MallInfo2
    return mallinfo2().hblkhd


@glibc_only
def test_a_64_mb_tensor_comes_from_the_heap_once_in_effect(monkeypatch):
    monkeypatch.delenv(memory.OPT_OUT, raising=False)
    assert memory.reuse_freed_memory()
    before = _mmapped_bytes()
    x = torch.ones(1 << 26, dtype=torch.uint8)  # 64 MiB: above glibc's largest default mmap threshold (32 MiB)
    assert _mmapped_bytes() - before < x.numel()


def test_opting_out_leaves_glibc_alone(monkeypatch):
    def no_libc(*args, **kwargs):
        raise AssertionError("reuse_freed_memory loaded libc although FEDCOMPANION_SYSTEM_MALLOC is set")

    monkeypatch.setenv(memory.OPT_OUT, "1")
    monkeypatch.setattr(memory, "_applied", None)
    monkeypatch.setattr(memory.ctypes, "CDLL", no_libc)
    assert memory.reuse_freed_memory() is False
