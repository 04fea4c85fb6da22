"""Synthetic generators: shapes, determinism, and that the samples follow the stated model."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streammom.datasets import (
    block_topic_matrix,
    make_bernoulli_mixture,
    make_block_topics,
    make_hierarchical_bernoulli,
    make_sparse_binary,
    sample_bernoulli_csr,
)


def _max_abs_z(X: sp.csr_array, labels: np.ndarray, prevalence: np.ndarray) -> float:
    """Largest |z| of the per-class column frequencies against the true Bernoulli rates."""
    k = prevalence.shape[0]
    onehot = sp.csr_array((np.ones(labels.size), (labels, np.arange(labels.size))),
                          shape=(k, labels.size))
    counts = (onehot @ X).toarray()
    n = np.bincount(labels, minlength=k)[:, None].astype(float)
    p = prevalence
    var = n * p * (1 - p)
    ok = var > 0
    z = np.zeros_like(p)
    z[ok] = (counts[ok] - n.repeat(p.shape[1], 1)[ok] * p[ok]) / np.sqrt(var[ok])
    # cells with p = 0 or 1 must match exactly
    exact = ~ok
    assert np.allclose(counts[exact], (n.repeat(p.shape[1], 1) * p)[exact])
    return float(np.abs(z).max())


def test_sample_bernoulli_csr_is_exact_bernoulli() -> None:
    rng = np.random.default_rng(3)
    p = np.array([0.0, 1.0, 0.5, 0.2, 0.01, 1e-4, 0.9, 0.33, 0.07])
    n = 40_000
    rows, cols = sample_bernoulli_csr(rng, n, p)
    # no cell drawn twice
    assert np.unique(rows * p.size + cols).size == rows.size
    assert rows.min() >= 0 and rows.max() < n
    freq = np.bincount(cols, minlength=p.size) / n
    assert freq[0] == 0.0 and freq[1] == 1.0
    se = np.sqrt(p * (1 - p) / n)
    mask = se > 0
    assert np.all(np.abs(freq[mask] - p[mask]) < 5 * se[mask] + 1e-12)
    # independence across columns: correlation of two mid-rate columns ≈ 0
    X = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n, p.size)).toarray()
    corr = np.corrcoef(X[:, 2], X[:, 7])[0, 1]
    assert abs(corr) < 5 / np.sqrt(n)


def test_sample_bernoulli_csr_validates() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        sample_bernoulli_csr(rng, 10, np.array([0.5, 1.5]))
    r, c = sample_bernoulli_csr(rng, 10, np.zeros(3))
    assert r.size == c.size == 0


def test_hierarchical_bernoulli_shapes_levels_and_determinism() -> None:
    X, y, levels = make_hierarchical_bernoulli(5_000, 500, 8, random_state=4)
    assert isinstance(X, sp.csr_array) and X.dtype == np.float64 and X.shape == (5_000, 500)
    assert y.dtype == np.int64 and levels.dtype == np.int64 and levels.shape == (5_000, 3)
    assert set(np.unique(X.data)) == {1.0}
    np.testing.assert_array_equal(levels[:, -1], y)
    for lev in range(3):
        np.testing.assert_array_equal(levels[:, lev], y >> (2 - lev))
        assert levels[:, lev].max() < 2 ** (lev + 1)
    X2, y2, _ = make_hierarchical_bernoulli(5_000, 500, 8, random_state=4)
    assert (X != X2).nnz == 0 and np.array_equal(y, y2)
    X3, _, _ = make_hierarchical_bernoulli(5_000, 500, 8, random_state=5)
    assert (X != X3).nnz > 0


def test_hierarchical_bernoulli_follows_its_model() -> None:
    X, y, _, truth = make_hierarchical_bernoulli(
        60_000, 500, 8, codes_per_event=10.0, random_state=1, return_truth=True
    )
    # about 10 codes per event, as asked
    assert X.nnz / X.shape[0] == pytest.approx(10.0, rel=0.05)
    # the expected number of codes per leaf is 10 by construction (up to the background clip)
    assert truth.prevalence.sum(axis=1) == pytest.approx(np.full(8, 10.0), rel=0.05)
    # per-leaf column frequencies agree with the stated prevalences (max |z| over 4,000 cells)
    assert _max_abs_z(X, y, truth.prevalence) < 5.5
    # leaf frequencies agree with the leaf weights
    freq = np.bincount(y, minlength=8) / y.size
    assert np.abs(freq - truth.leaf_weights).max() < 5 * np.sqrt(0.25 / y.size)
    # tree structure: a leaf's signature blocks are exactly those of its root path
    L, k = truth.depth, 8
    for leaf in range(k):
        path, v = [], k - 1 + leaf
        while True:
            path.append(v)
            if v == 0:
                break
            v = (v - 1) // 2
        assert len(path) == L + 1
        b = truth.blocks[0].size
        top = np.argsort(-truth.prevalence[leaf], kind="stable")[: (L + 1) * b]
        assert set(truth.node_of_feature[top].tolist()) == set(path)
        assert np.all(truth.prevalence[leaf, top].min() > np.delete(truth.prevalence[leaf], top))
    # off-path features have the same (background) rate in every leaf
    off = np.ones(truth.prevalence.shape, dtype=bool)
    for leaf in range(k):
        v = k - 1 + leaf
        while True:
            off[leaf, truth.blocks[v]] = False
            if v == 0:
                break
            v = (v - 1) // 2
    cols = off.any(axis=0)  # every feature but the root block's
    background = np.where(off, truth.prevalence, np.nan)[:, cols]
    assert np.allclose(np.nanmax(background, axis=0), np.nanmin(background, axis=0))


def test_hierarchical_bernoulli_validation() -> None:
    with pytest.raises(ValueError, match="power of 2"):
        make_hierarchical_bernoulli(10, 500, 6)
    with pytest.raises(ValueError):
        make_hierarchical_bernoulli(10, 20, 8)  # not enough features for 15 blocks
    with pytest.raises(ValueError, match="prevalence"):
        make_hierarchical_bernoulli(10, 500, 8, codes_per_event=200.0)
    with pytest.raises(ValueError):
        make_hierarchical_bernoulli(0, 500, 8)
    with pytest.raises(TypeError):
        make_hierarchical_bernoulli(10, 500, 8, random_state=1.5)  # type: ignore[arg-type]


def test_sparse_binary_nnz_per_row() -> None:
    X, y = make_sparse_binary(20_000, 2_000, 10, 8, random_state=0)
    assert X.shape == (20_000, 2_000) and y.shape == (20_000,)
    assert X.nnz / X.shape[0] == pytest.approx(10.0, rel=0.05)


def test_block_topics_matches_the_paper_setup() -> None:
    X, y, truth = make_block_topics(random_state=0, return_truth=True)
    assert X.shape == (400, 99)  # pandas header quirk of the reference script
    np.testing.assert_array_equal(np.asarray(X.sum(axis=1)).ravel(), np.full(400, 200.0))
    assert np.allclose(truth.M.sum(axis=0), 1.0) and truth.M.shape == (99, 8)
    assert truth.omega.sum() == pytest.approx(1.0) and np.all(truth.omega > 0)
    assert y.min() >= 0 and y.max() < 8
    X100, _ = make_block_topics(random_state=0, drop_first_row=False)
    assert X100.shape == (400, 100)
    # without noise the topics are exactly the normalised block matrix
    _, _, clean = make_block_topics(random_state=0, noise=0.0, return_truth=True)
    B = block_topic_matrix()[1:]
    np.testing.assert_allclose(clean.M, B / B.sum(axis=0))
    # noise is in [0, 0.1) before normalisation: high entries stay well above low ones
    block = block_topic_matrix()[1:] > 0.5
    assert truth.M[block].min() > truth.M[~block].max()
    # the word counts follow the topics: per-topic empirical frequencies close to M
    for j in range(8):
        rows = y == j
        if rows.sum() >= 20:
            emp = np.asarray(X[rows].sum(axis=0)).ravel() / (200 * rows.sum())
            assert np.abs(emp - truth.M[:, j]).max() < 0.02
    X2, y2 = make_block_topics(random_state=0)
    assert (X != X2).nnz == 0 and np.array_equal(y, y2)


def test_bernoulli_mixture_reference_generator() -> None:
    X, y, truth = make_bernoulli_mixture(20_000, 99, 4, random_state=2, return_truth=True)
    assert X.shape == (20_000, 99) and set(np.unique(X.data)) == {1.0}
    assert truth.M.shape == (99, 4) and truth.M.min() >= 0 and truth.M.max() < 1
    # M ← M / (1 + max M): the largest entry is max/(1+max), just below 1 for scale 10
    assert truth.M.max() > 0.9
    assert truth.omega.sum() == pytest.approx(1.0)
    assert _max_abs_z(X, y, truth.M.T) < 5.5
