"""Centralised datasets as tensors: bundled MNIST and QSAR, torchvision downloads for the rest.

Every loader returns ``(train, test)`` as :class:`ArrayDataset`; federated structure is added
later by a partitioner (:mod:`fedcompanion.data.partition`). ``LOADERS`` names them; ``register_dataset`` adds a
user's own (a loader, or the arrays themselves), whose content digest then becomes part of every cache key that
uses it (:func:`dataset_digest`), so changed arrays are recomputed, never served stale.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import hashlib
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..registry import Registry, travel_problem
from ..validation import ConfigError, check_number
from .files import DataError, cache_dir, reads, verified_path

MNIST_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
               "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
MNIST_STATS = ((0.1307,), (0.3081,))  # mean and std of the training pixels in [0, 1]


@dataclass(frozen=True)
class ArrayDataset:
    """Features ``x`` (shape [n, ...], float32) and labels ``y`` (shape [n], int64 or float32)."""

    x: torch.Tensor
    y: torch.Tensor
    num_classes: int

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index) -> ArrayDataset:
        """The rows ``index`` as a new dataset (same number of classes)."""
        index = torch.as_tensor(np.asarray(index), dtype=torch.long)
        return ArrayDataset(self.x[index], self.y[index], self.num_classes)


def _standardised(data: np.ndarray, targets, mean: tuple, std: tuple) -> ArrayDataset:
    """uint8 images [n, H, W] or [n, H, W, C] -> float32 [n, C, H, W], scaled to [0, 1], then (x - mean) / std
    per channel; integer targets -> int64 labels."""
    x = torch.as_tensor(np.asarray(data)).float().div_(255.0)
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)  # -> [n, C, H, W]
    mean_t = torch.tensor(mean).view(1, -1, 1, 1)
    std_t = torch.tensor(std).view(1, -1, 1, 1)
    x = ((x - mean_t) / std_t).contiguous()
    y = torch.as_tensor(np.asarray(targets), dtype=torch.long)
    return ArrayDataset(x, y, int(y.max()) + 1)


def read_idx(path: Path) -> np.ndarray:
    """A gzipped IDX file of unsigned bytes as an array: the header is two zero bytes, the type code 0x08
    (uint8), the number of dimensions d, then d sizes as big-endian 32-bit integers; the data follow."""
    raw = gzip.decompress(path.read_bytes())
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08":
        raise DataError(f"{path} is not an IDX file of unsigned bytes (header {raw[:4].hex()})")
    ndim = raw[3]
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != math.prod(shape):
        raise DataError(f"{path} holds {data.size} bytes of data, its header says {shape}")
    return data.reshape(shape).copy()


@functools.lru_cache(maxsize=1)
def _mnist(files: tuple[tuple[Path, float], ...]) -> tuple[ArrayDataset, ArrayDataset]:
    """Both splits from the (path, mtime) of their four verified files (the key: another data folder, or a file
    changed since, is read again)."""
    (train_x, _), (train_y, _), (test_x, _), (test_y, _) = files
    return (_standardised(read_idx(train_x), read_idx(train_y), *MNIST_STATS),
            _standardised(read_idx(test_x), read_idx(test_y), *MNIST_STATS))


@reads(*(f"mnist/{name}" for pair in MNIST_FILES.values() for name in pair))
def load_mnist() -> tuple[ArrayDataset, ArrayDataset]:
    """MNIST from the shipped IDX files (verified against ``data/SHA256SUMS``), read directly; pixels are scaled
    to [0, 1] and standardised (mean 0.1307, std 0.3081). Bit for bit what ``torchvision.datasets.MNIST`` gives
    (tested), without importing torchvision, which costs seconds in every process that builds a task. The files
    are read once per process (0.4 s); each call returns its own copy, so a caller that writes into it changes
    no later task."""
    paths = [verified_path(f"mnist/{name}") for split in ("train", "test") for name in MNIST_FILES[split]]
    return tuple(ArrayDataset(d.x.clone(), d.y.clone(), d.num_classes)
                 for d in _mnist(tuple((path, path.stat().st_mtime) for path in paths)))


def _download(cls_name: str, stats) -> tuple[ArrayDataset, ArrayDataset]:
    import torchvision.datasets as tvd

    root = str(cache_dir())
    try:
        train = getattr(tvd, cls_name)(root, train=True, download=True)
        test = getattr(tvd, cls_name)(root, train=False, download=True)
    except Exception as exc:  # torchvision raises URLError, RuntimeError, ... when offline
        raise DataError(
            f"{cls_name} is not shipped with fedcompanion and could not be downloaded to {root} "
            f"({type(exc).__name__}: {exc}). Run once on a machine that is online, or copy "
            f"torchvision's {cls_name} folder there. Offline, use dataset='mnist' or 'qsar'."
        ) from exc
    return _standardised(train.data, train.targets, *stats), _standardised(test.data, test.targets, *stats)


@reads("qsar_oral_toxicity/qsar_oral_toxicity.csv.gz")
def load_qsar(test_fraction: float = 0.2, seed: int = 0) -> tuple[ArrayDataset, ArrayDataset]:
    """QSAR oral toxicity (8,992 molecules x 1,024 fingerprint bits), as in the CEADMM paper.

    Labels ``positive``/``negative`` map to 1/0; each column is scaled to unit Euclidean norm
    (all-zero columns stay zero); rows are shuffled with ``seed`` and ``test_fraction`` of them
    are held out for accuracy.
    """
    check_number("test_fraction", test_fraction, low=0.0, high=1.0)
    path = verified_path("qsar_oral_toxicity/qsar_oral_toxicity.csv.gz")
    with gzip.open(path, "rt") as f:
        rows = [line.strip().split(";") for line in f if line.strip()]
    x = np.array([r[:-1] for r in rows], dtype=np.float64)
    labels = [r[-1] for r in rows]
    bad = set(labels) - {"positive", "negative"}
    if bad:
        raise DataError(f"{path}: unexpected labels {sorted(bad)[:3]}; is the file corrupted?")
    y = np.array([lab == "positive" for lab in labels], dtype=np.float64)
    norms = np.linalg.norm(x, axis=0)
    x = x / np.where(norms > 0, norms, 1.0)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    return ArrayDataset(xt[train], yt[train], 2), ArrayDataset(xt[test], yt[test], 2)


def _check_loader(name: str, loader: Callable) -> Callable:
    if not callable(loader):
        raise ConfigError(f"register_dataset's loader must be callable, got {type(loader).__name__}")
    return loader


LOADERS = Registry("dataset", _check_loader)


def load_fashion_mnist() -> tuple[ArrayDataset, ArrayDataset]:
    """Fashion-MNIST through torchvision (not shipped: downloaded once where a machine is online)."""
    return _download("FashionMNIST", ((0.2860,), (0.3530,)))


def load_cifar10() -> tuple[ArrayDataset, ArrayDataset]:
    """CIFAR-10 through torchvision (not shipped: downloaded once where a machine is online)."""
    return _download("CIFAR10", ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)))


for _name, _loader in (("mnist", load_mnist), ("qsar", load_qsar), ("fashion_mnist", load_fashion_mnist),
                      ("cifar10", load_cifar10)):
    LOADERS.register(_name, _loader)


def load_dataset(name: str, **kwargs) -> tuple[ArrayDataset, ArrayDataset]:
    """Load a centralised dataset by name: ``mnist``, ``qsar``, ``fashion_mnist``, ``cifar10`` or a registered one."""
    return LOADERS.lookup(name)(**kwargs)


@dataclass(frozen=True)
class Arrays:
    """A loader that returns the arrays it holds: how a user's data (or a notebook's loader, evaluated once)
    reaches a sweep's worker processes."""

    train: ArrayDataset
    test: ArrayDataset | None

    def __call__(self) -> tuple[ArrayDataset, ArrayDataset | None]:
        return self.train, self.test


def register_dataset(name: str, loader: Callable | None = None, *, train: ArrayDataset | None = None,
                     test: ArrayDataset | None = None):
    """Make ``dataset=name`` available to every dataset task: either ``loader() -> (train, test)`` (a decorator
    without it) or the arrays ``train`` and ``test`` (:class:`ArrayDataset`; ``test`` may be ``None``)."""
    if loader is None and train is None and test is None:
        return LOADERS.register(name)
    if (loader is None) == (train is None):
        raise ConfigError("register_dataset takes a loader or train=ArrayDataset(...), not both")
    for what, value in (("train", train), ("test", test)):
        if value is not None and not isinstance(value, ArrayDataset):
            raise ConfigError(f"register_dataset's {what} must be an ArrayDataset, got {type(value).__name__}")
    return LOADERS.register(name, loader if loader is not None else Arrays(train, test))


def detached(data):
    """``data`` (a tensor, a dataclass of tensors ``x`` and ``y`` such as :class:`ArrayDataset`, or None) with no
    tensor that requires grad: features computed with autograd on are data here, not a graph to carry into every
    engine (whose kernels would fail on them)."""
    if isinstance(data, torch.Tensor):
        return data.detach() if data.requires_grad else data
    grads = data is not None and (data.x.requires_grad or data.y.requires_grad)
    return dataclasses.replace(data, x=data.x.detach(), y=data.y.detach()) if grads else data


_DIGESTS: dict[tuple, tuple[object, str]] = {}
_HOLDING = [0]  # how many hold_digests() are open


@contextlib.contextmanager
def hold_digests():
    """Inside, each digest of a user's data (:func:`held_digest`) is computed once: a sweep keys hundreds of configs
    over the same arrays. Outside, every key reads the data again, so data that changed in this process (a notebook
    cell run again, an array edited in place) are never keyed by their old digest. The outermost block starts and
    ends with nothing held."""
    if not _HOLDING[0]:
        _DIGESTS.clear()
    _HOLDING[0] += 1
    try:
        yield
    finally:
        _HOLDING[0] -= 1
        if not _HOLDING[0]:
            _DIGESTS.clear()


def held_digest(owner, key, compute: Callable[[], str]) -> str:
    """``compute()``: the digest of the data ``owner`` (a loader, a task builder) gives for ``key``; computed once
    per (owner, key) inside :func:`hold_digests`, every time outside it."""
    if not _HOLDING[0]:
        return compute()
    cached = _DIGESTS.get((id(owner), key))
    if cached is None or cached[0] is not owner:  # (the owner is kept, so its id names no other object)
        _DIGESTS[(id(owner), key)] = (owner, compute())
    return _DIGESTS[(id(owner), key)][1]


def hash_tensors(digest, *tensors: torch.Tensor | None) -> None:
    """Feed each tensor's dtype, shape and bytes (or ``none``) to a ``hashlib`` digest."""
    for t in tensors:
        if t is None:
            digest.update(b"none")
            continue
        t = t.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes())


def dataset_digest(name: str) -> str:
    """SHA-256 (16 hex digits) of what a user dataset's loader returns (shapes, dtypes, bytes, class counts), read
    now (once per :func:`hold_digests` block). A shipped dataset is pinned by the checksums of its files instead
    (``ExperimentConfig.data_files``)."""
    loader = LOADERS.lookup(name)

    def compute() -> str:
        digest = hashlib.sha256()
        for part in loader():
            digest.update(b"none" if part is None else str(part.num_classes).encode())
            hash_tensors(digest, *((None, None) if part is None else (part.x, part.y)))
        return digest.hexdigest()[:16]

    return held_digest(loader, None, compute)


def transportable(name: str, loader: Callable) -> Callable:
    """``loader`` if it can reach a worker process (:func:`~fedcompanion.registry.travel_problem`), else the arrays
    it returns (:class:`Arrays`): a notebook's loader, lambda or ``def``, is evaluated here and its arrays sent."""
    return loader if travel_problem(loader) is None else Arrays(*loader())
