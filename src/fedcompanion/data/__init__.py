"""Datasets (bundled MNIST and QSAR, torchvision pass-through, synthetic) and partitioners."""
from .files import DataError, data_dir, verified_path
from .loaders import ArrayDataset, load_dataset
from .partition import (
    dirichlet_partition,
    iid_partition,
    label_counts,
    partition,
    quantity_skew_partition,
    shard_partition,
)

__all__ = [
    "ArrayDataset",
    "DataError",
    "data_dir",
    "dirichlet_partition",
    "iid_partition",
    "label_counts",
    "load_dataset",
    "partition",
    "quantity_skew_partition",
    "shard_partition",
    "verified_path",
]
