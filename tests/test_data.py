import shutil

import numpy as np
import pytest
import torch

from fedcompanion.data import DataError, load_dataset, verified_path
from fedcompanion.data.files import data_dir
from fedcompanion.data.synthetic import heterogeneous_least_squares, synthetic_li
from fedcompanion.validation import ConfigError


def test_shipped_files_verify():
    assert verified_path("mnist/train-images-idx3-ubyte.gz").stat().st_size > 9_000_000


def test_mnist_layout():
    train, test = load_dataset("mnist")
    assert train.x.shape == (60_000, 1, 28, 28) and test.x.shape == (10_000, 1, 28, 28)
    assert train.num_classes == 10
    assert np.bincount(train.y.numpy()).tolist()[:2] == [5923, 6742]  # the canonical class counts
    assert abs(float(train.x.mean())) < 0.01  # standardised


def test_mnist_reader_gives_torchvisions_tensors_bit_for_bit(tmp_path):
    import gzip

    import torch
    from torchvision.datasets import MNIST

    from fedcompanion.data.loaders import MNIST_FILES, MNIST_STATS, _standardised

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (*MNIST_FILES["train"], *MNIST_FILES["test"]):
        (raw / name[: -len(".gz")]).write_bytes(gzip.decompress(verified_path(f"mnist/{name}").read_bytes()))
    for ours, train in zip(load_dataset("mnist"), (True, False)):
        reference = MNIST(str(tmp_path), train=train, download=False)
        expected = _standardised(reference.data, reference.targets, *MNIST_STATS)
        assert torch.equal(ours.x, expected.x) and torch.equal(ours.y, expected.y)
        assert ours.x.dtype == torch.float32 and ours.y.dtype == torch.int64


def test_idx_reader_rejects_other_files(tmp_path):
    import gzip

    from fedcompanion.data.loaders import read_idx

    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x0d\x01" + (3).to_bytes(4, "big") + bytes(12)))  # float32 IDX
    with pytest.raises(DataError, match="not an IDX file of unsigned bytes"):
        read_idx(path)
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x01" + (5).to_bytes(4, "big") + bytes(3)))  # truncated
    with pytest.raises(DataError, match="holds 3 bytes of data, its header says \\(5,\\)"):
        read_idx(path)


def test_qsar_layout():
    train, test = load_dataset("qsar")
    assert len(train) + len(test) == 8992 and train.x.shape[1] == 1024
    assert int(train.y.sum() + test.y.sum()) == 741  # positives
    import torch

    norms = torch.linalg.norm(torch.cat([train.x, test.x]).double(), dim=0)
    assert (norms - 1).abs().max() < 1e-6  # every column scaled to unit norm


def _copy_data(tmp_path, monkeypatch):
    target = tmp_path / "data"
    shutil.copytree(data_dir(), target)
    monkeypatch.setenv("FEDCOMPANION_DATA", str(target))
    monkeypatch.setenv("FEDCOMPANION_CACHE", str(tmp_path / "cache"))
    return target


def test_corrupted_file_is_named(tmp_path, monkeypatch):
    target = _copy_data(tmp_path, monkeypatch)
    path = target / "qsar_oral_toxicity" / "qsar_oral_toxicity.csv.gz"
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(DataError, match="qsar_oral_toxicity.csv.gz is corrupted.*git checkout"):
        load_dataset("qsar")


def test_missing_file_is_named(tmp_path, monkeypatch):
    target = _copy_data(tmp_path, monkeypatch)
    (target / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz is missing"):
        load_dataset("mnist")


def test_mnist_is_read_once_and_every_caller_gets_its_own_copy():
    first = load_dataset("mnist")
    kept = first[1].x[:3].clone()
    first[1].x.zero_()  # a caller writing into what it was given
    second = load_dataset("mnist")
    assert torch.equal(second[1].x[:3], kept) and second[0].x.data_ptr() != first[0].x.data_ptr()


def test_unknown_dataset_names_choices():
    with pytest.raises(ConfigError, match="unknown dataset 'mnsit'.*mnist"):
        load_dataset("mnsit")


def test_offline_download_gives_clear_error(monkeypatch, tmp_path):
    import torchvision.datasets as tvd

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setenv("FEDCOMPANION_CACHE", str(tmp_path))
    monkeypatch.setattr(tvd, "CIFAR10", offline)
    with pytest.raises(DataError, match="CIFAR10 is not shipped.*could not be downloaded.*offline"):
        load_dataset("cifar10")


def test_synthetic_generators_are_seeded():
    a = synthetic_li(5, 1.0, 1.0, np.random.default_rng(3))
    b = synthetic_li(5, 1.0, 1.0, np.random.default_rng(3))
    assert all(np.array_equal(x1, x2) and np.array_equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))
    assert all(n >= 50 for n in (len(y) for _, y in a))
    lsq = heterogeneous_least_squares(9, 7, np.random.default_rng(0))
    assert all(50 <= len(b) <= 150 and a.shape[1] == 7 for a, b in lsq)
    # the U[-5, 5] third is bounded, the Student-t third is heavy-tailed
    assert np.abs(lsq[3][0]).max() <= 5 and np.abs(lsq[0][0]).max() > 3
