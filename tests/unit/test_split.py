"""The 2-way split: implicit moments against explicit tensors, separation, orientation."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from streammom.datasets import make_block_topics, make_hierarchical_bernoulli
from streammom.decompose import NonPositiveEigenvalueError, sidiwo_objective
from streammom.estimators import moments_from_data
from streammom.split import Split, compute_split


def _explicit_raw(X: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw moments M1, M2, M3 = Σ w_i x_i^{⊗1,2,3} / Σ w_i as dense arrays (thesis ch. 4 §4.3)."""
    W = w.sum()
    m1 = w @ X / W
    m2 = np.einsum("i,ia,ib->ab", w, X, X) / W
    m3 = np.einsum("i,ia,ib,ic->abc", w, X, X, X) / W
    return m1, m2, m3


def _explicit_single_topic(
    X: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Thesis Thm 3.2.1 estimators, entry by entry (factorial moments over distinct positions)."""
    d = X.shape[1]
    t = X.sum(axis=1)
    T1 = w @ t
    T2 = w @ (t * np.maximum(t - 1, 0))
    T3 = w @ (t * np.maximum(t - 1, 0) * np.maximum(t - 2, 0))
    m1 = w @ X / T1
    m2 = np.empty((d, d))
    for h, g in product(range(d), repeat=2):
        val = X[:, h] * (X[:, h] - 1) if h == g else X[:, h] * X[:, g]
        m2[h, g] = w @ val / T2
    m3 = np.empty((d, d, d))
    for h, g, m in product(range(d), repeat=3):
        xh, xg, xm = X[:, h], X[:, g], X[:, m]
        if h == g == m:
            val = xh * (xh - 1) * (xh - 2)
        elif h == g:
            val = xh * (xh - 1) * xm
        elif g == m:
            val = xh * xg * (xg - 1)
        elif h == m:
            val = xh * (xh - 1) * xg
        else:
            val = xh * xg * xm
        m3[h, g, m] = w @ val / T3
    return m1, m2, m3


def _packed_slices(m3: np.ndarray, Epinv: np.ndarray) -> np.ndarray:
    H = np.einsum("ia,abr,jb->rij", Epinv, m3, Epinv)
    return np.column_stack((H[:, 0, 0], H[:, 0, 1], H[:, 1, 1]))


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
@pytest.mark.parametrize("weighted", [False, True])
def test_implicit_moments_equal_explicit_tensors(family: str, weighted: bool) -> None:
    rng = np.random.default_rng(7)
    n, d = 60, 7
    if family == "bernoulli":
        X = (rng.random((n, d)) < 0.4).astype(float)
        explicit = _explicit_raw
    else:
        X = rng.poisson(rng.uniform(0.2, 1.5, size=d), size=(n, d)).astype(float)
        X[:3] = 0.0
        X[3, :] = 0.0
        X[3, 0] = 2.0  # short documents (t < 3) contribute nothing to the higher moments
        explicit = _explicit_single_topic
    w = rng.uniform(0.2, 2.0, size=n) if weighted else np.ones(n)
    m1, m2, m3 = explicit(X, w)
    assert np.allclose(m3, m3.transpose(1, 0, 2)) and np.allclose(m3, m3.transpose(2, 1, 0))
    moments = moments_from_data(sp.csr_array(X), w if weighted else None, family=family)
    np.testing.assert_allclose(moments.m1, m1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(moments.m2 @ np.eye(d), m2, rtol=0, atol=1e-12)
    for Epinv in (rng.normal(size=(2, d)), rng.normal(size=(2, d)) * 10):
        implicit = moments.third(Epinv)
        expected = _packed_slices(m3, Epinv)
        scale = np.abs(expected).max()
        np.testing.assert_allclose(implicit / scale, expected / scale, rtol=0, atol=1e-10)


def test_split_rotation_minimises_the_explicit_objective() -> None:
    """On explicit whitened slices of real data, the closed-form θ beats a fine grid."""
    rng = np.random.default_rng(0)
    X = (rng.random((300, 6)) < np.linspace(0.1, 0.6, 6)).astype(float)
    moments = moments_from_data(sp.csr_array(X))
    split = compute_split(moments)
    _, _, m3 = _explicit_raw(X, np.ones(300))
    H = np.einsum("ia,abr,jb->rij", split.discriminators, m3, split.discriminators)
    achieved = float(np.sum(H[:, 0, 1] ** 2))
    E = split.whitening.pinv
    packed = _packed_slices(m3, E)
    grid = np.linspace(-1, 1, 20_001)
    values = sidiwo_objective(grid, packed[:, 1], packed[:, 0] - packed[:, 2])
    assert achieved <= values.min() + 1e-12
    # discriminators whiten M2: D M2 Dᵀ = I (thesis Lemma 6.2.1)
    M2 = X.T @ X / 300
    np.testing.assert_allclose(split.discriminators @ M2 @ split.discriminators.T, np.eye(2),
                               atol=1e-10)


def _two_clusters(n: int, seed: int) -> tuple[sp.csr_array, np.ndarray]:
    X, y, _ = make_hierarchical_bernoulli(n, 200, 2, codes_per_event=12.0, signal=0.9,
                                          random_state=seed)
    return X, y


def _side(split: Split, X: sp.csr_array) -> np.ndarray:
    scores = np.asarray(X @ split.router.weights.T) + split.router.bias
    if split.router.absolute:
        scores = np.abs(scores)
    return (scores[:, 1] > scores[:, 0]).astype(int)


@pytest.mark.parametrize("method", ["dsidiwo", "sidiwo"])
def test_split_separates_two_well_separated_bernoulli_clusters(method: str) -> None:
    X, y = _two_clusters(4_000, 0)
    split = compute_split(moments_from_data(X), family="bernoulli", method=method)
    assert adjusted_rand_score(y, _side(split, X)) > 0.95
    assert split.quality["rotation_gap"] > 0.5
    if method == "sidiwo":
        assert split.quality["sidiwo_degenerate"] == 0.0
        assert split.centres is not None and split.mixing is not None
        assert split.centres.min() >= 0 and split.centres.max() <= 1
        assert split.mixing.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("method", ["dsidiwo", "sidiwo"])
def test_split_separates_topic_groups(method: str) -> None:
    """Root split of the 8-topic corpus: topics {1–4} versus {5–8} (paper §4.1)."""
    X, y = make_block_topics(random_state=3)
    split = compute_split(moments_from_data(X, family="multinomial"), family="multinomial",
                          method=method)
    assert adjusted_rand_score(y >= 4, _side(split, X)) > 0.95
    if method == "sidiwo":
        assert np.allclose(split.centres.sum(axis=1), 1.0) and split.centres.min() >= 0


def test_reference_discriminators_keep_child_order() -> None:
    X_a, _ = _two_clusters(3_000, 1)
    X_b, _ = _two_clusters(3_000, 2)
    X_test, _ = _two_clusters(2_000, 3)
    first = compute_split(moments_from_data(X_a))
    side_a = _side(first, X_test)
    for reference, expect_same in ((first.discriminators, True),
                                   (first.swapped().discriminators, False)):
        for seed in range(3):
            again = compute_split(moments_from_data(X_b), reference_discriminators=reference,
                                  random_state=seed)
            agreement = float(np.mean(_side(again, X_test) == side_a))
            assert agreement > 0.95 if expect_same else agreement < 0.05


def test_swapped_split_routes_to_the_other_child() -> None:
    X, _ = _two_clusters(2_000, 4)
    for method in ("dsidiwo", "sidiwo"):
        split = compute_split(moments_from_data(X), method=method)
        swapped = split.swapped()
        np.testing.assert_array_equal(_side(swapped, X), 1 - _side(split, X))
        np.testing.assert_array_equal(swapped.discriminators, split.discriminators[::-1])
        # the swapped rotation gives the same discriminators up to row signs
        D = swapped.rotation.matrix.T @ swapped.whitening.pinv
        np.testing.assert_allclose(np.abs(D), np.abs(swapped.discriminators), atol=1e-12)
        assert swapped.rotation.objective == split.rotation.objective
        twice = swapped.swapped()
        np.testing.assert_array_equal(twice.router.weights, split.router.weights)
        np.testing.assert_array_equal(twice.discriminators, split.discriminators)
        np.testing.assert_allclose(twice.rotation.matrix, split.rotation.matrix, atol=1e-15)
        if method == "sidiwo":
            np.testing.assert_array_equal(swapped.centres, split.centres[::-1])
            np.testing.assert_array_equal(swapped.mixing, split.mixing[::-1])


def test_rank_one_moments_raise_and_tiny_dimensions_work() -> None:
    X = sp.csr_array(np.tile([1.0, 1.0, 0.0, 1.0, 0.0], (50, 1)))
    with pytest.raises(NonPositiveEigenvalueError):
        compute_split(moments_from_data(X))
    rng = np.random.default_rng(0)
    for d in (2, 3):
        Xd = sp.csr_array((rng.random((100, d)) < 0.5).astype(float))
        split = compute_split(moments_from_data(Xd))
        assert split.discriminators.shape == (2, d)
