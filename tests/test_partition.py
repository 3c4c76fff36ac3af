import numpy as np
import pytest

from fedcompanion.data import label_counts, partition
from fedcompanion.validation import ConfigError

LABELS = np.random.default_rng(0).integers(0, 10, 5000)


def _check_cover(parts, n):
    joined = np.concatenate(parts)
    assert len(joined) == n, "disjoint: no sample twice"
    assert np.array_equal(np.sort(joined), np.arange(n)), "every sample covered"


@pytest.mark.parametrize("scheme,kw", [("iid", {}), ("dirichlet", {"alpha": 0.1}),
                                       ("shards", {"shards_per_client": 2}), ("quantity", {"beta": 0.5})])
def test_cover_disjoint_reproducible(scheme, kw):
    a = partition(LABELS, 40, scheme, np.random.default_rng(7), **kw)
    b = partition(LABELS, 40, scheme, np.random.default_rng(7), **kw)
    c = partition(LABELS, 40, scheme, np.random.default_rng(8), **kw)
    _check_cover(a, len(LABELS))
    assert len(a) == 40 and all(len(p) > 0 for p in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)), "same seed, same split"
    assert any(not np.array_equal(x, y) for x, y in zip(a, c)), "other seed, other split"


def test_dirichlet_huge_alpha_is_close_to_iid():
    parts = partition(LABELS, 10, "dirichlet", np.random.default_rng(0), alpha=1e6)
    share = label_counts(parts, LABELS, 10)
    share = share / share.sum(axis=1, keepdims=True)
    overall = np.bincount(LABELS) / len(LABELS)
    assert np.abs(share - overall).max() < 0.03


def test_dirichlet_small_alpha_is_skewed():
    parts = partition(LABELS, 10, "dirichlet", np.random.default_rng(0), alpha=0.05)
    share = label_counts(parts, LABELS, 10)
    share = share / share.sum(axis=1, keepdims=True)
    assert np.median(share.max(axis=1)) > 0.5  # most clients dominated by one class


def test_shards_limit_classes():
    parts = partition(np.repeat(np.arange(10), 100), 10, "shards", np.random.default_rng(0), shards_per_client=2)
    assert all(len(np.unique(np.repeat(np.arange(10), 100)[p])) <= 2 for p in parts)


@pytest.mark.parametrize("alpha", [0, -1.0])
def test_bad_alpha_is_named(alpha):
    with pytest.raises(ConfigError, match=r"alpha must be > 0"):
        partition(LABELS, 10, "dirichlet", np.random.default_rng(0), alpha=alpha)


def test_bad_scheme_and_clients():
    with pytest.raises(ConfigError, match="unknown partition 'pathological'"):
        partition(LABELS, 10, "pathological", np.random.default_rng(0))
    with pytest.raises(ConfigError, match="num_clients"):
        partition(LABELS, 0, "iid", np.random.default_rng(0))
