"""Centralised datasets as tensors: bundled MNIST and QSAR, torchvision downloads for the rest.

Every loader returns ``(train, test)`` as :class:`ArrayDataset`; federated structure is added
later by a partitioner (:mod:`fedcompanion.data.partition`).
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..validation import check_choice, check_number
from .files import DataError, cache_dir, verified_path

# SHA-256 of the decompressed IDX files (the canonical MNIST), to verify the decompressed cache
MNIST_FILES = {
    "train-images-idx3-ubyte.gz": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte.gz": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte.gz": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte.gz": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}


@dataclass(frozen=True)
class ArrayDataset:
    """Features ``x`` (shape [n, ...], float32) and labels ``y`` (shape [n], int64 or float32)."""

    x: torch.Tensor
    y: torch.Tensor
    num_classes: int

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index) -> ArrayDataset:
        index = torch.as_tensor(np.asarray(index), dtype=torch.long)
        return ArrayDataset(self.x[index], self.y[index], self.num_classes)


def _from_torchvision(ds, mean: tuple, std: tuple) -> ArrayDataset:
    data = torch.as_tensor(np.asarray(ds.data))
    x = data.float().div_(255.0)
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)  # -> [n, C, H, W]
    mean_t = torch.tensor(mean).view(1, -1, 1, 1)
    std_t = torch.tensor(std).view(1, -1, 1, 1)
    x = ((x - mean_t) / std_t).contiguous()
    y = torch.as_tensor(np.asarray(ds.targets), dtype=torch.long)
    return ArrayDataset(x, y, int(y.max()) + 1)


def _decompressed(source: Path, target: Path, expected: str) -> None:
    """Make ``target`` the verified decompression of ``source``: keep it if its SHA-256 is ``expected``,
    else (missing, truncated, edited) decompress again through a unique temporary file and an atomic rename,
    so concurrent processes never see a half-written file."""
    if target.exists() and _digest_once(target, target.stat().st_mtime_ns, target.stat().st_size) == expected:
        return
    if target.exists():
        warnings.warn(f"{target} does not match MNIST's checksum; decompressing it again", stacklevel=3)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with gzip.open(source) as fin, os.fdopen(fd, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        if digest != expected:
            raise DataError(f"{source} decompresses to data with sha256 {digest[:12]}..., not MNIST's")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@functools.cache
def _digest_once(path: Path, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_mnist() -> tuple[ArrayDataset, ArrayDataset]:
    """MNIST from the shipped IDX files, read by ``torchvision.datasets.MNIST``.

    The verified ``.gz`` files are decompressed into ``build/cache/MNIST/raw/`` (the layout torchvision
    expects), and the decompressed files are verified against MNIST's checksums on every load (once per
    process), so a damaged cache is rebuilt rather than read; pixels are scaled to [0, 1] and standardised
    (mean 0.1307, std 0.3081).
    """
    from torchvision.datasets import MNIST

    raw = cache_dir() / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name, expected in MNIST_FILES.items():
        _decompressed(verified_path(f"mnist/{name}"), raw / name[: -len(".gz")], expected)
    root = str(cache_dir())
    stats = ((0.1307,), (0.3081,))
    return (
        _from_torchvision(MNIST(root, train=True, download=False), *stats),
        _from_torchvision(MNIST(root, train=False, download=False), *stats),
    )


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
    return _from_torchvision(train, *stats), _from_torchvision(test, *stats)


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


LOADERS = {
    "mnist": load_mnist,
    "qsar": load_qsar,
    "fashion_mnist": lambda: _download("FashionMNIST", ((0.2860,), (0.3530,))),
    "cifar10": lambda: _download(
        "CIFAR10", ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    ),
}


def load_dataset(name: str, **kwargs) -> tuple[ArrayDataset, ArrayDataset]:
    """Load a centralised dataset by name: one of ``mnist``, ``qsar``, ``fashion_mnist``, ``cifar10``."""
    check_choice("dataset", name, LOADERS)
    return LOADERS[name](**kwargs)
