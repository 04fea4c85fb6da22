"""The labels' term of the evidence under a Dirichlet prior on the shares fitted to the leaves
(:mod:`streammom.shares_prior`)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streammom.evidence import EvidenceCache
from streammom.shares_prior import labels_log_prior, shares_concentration
from streammom.shrinkage import partition_evidence


def _siblings(n: int, seed: int) -> tuple[sp.csr_array, np.ndarray]:
    """Four clusters of ``n`` code sets over 60 codes; clusters 2 and 3 are siblings (eight
    codes in common, three of their own each)."""
    d, k = 60, 4
    rates = np.full((k, d), 0.03)
    rates[0, 0:6] = rates[1, 6:12] = 0.5
    rates[2:4, 12:20] = 0.5
    rates[2, 20:23] = rates[3, 23:26] = 0.45
    y = np.repeat(np.arange(k), n)
    rng = np.random.default_rng(seed)
    return sp.csr_array((rng.random((k * n, d)) < rates[y]).astype(float)), y


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_balanced_leaves_judge_sibling_clusters_apart(seed: int) -> None:
    """At the partition's ML shares the labels' entropy pays the partition that merges the
    siblings (leaving a component empty) more than their codes tell them apart; with the
    shares integrated out under the prior fitted to balanced leaves the truth is the more
    evident."""
    X, y = _siblings(60, seed)
    merged = np.where(y == 3, 2, y)
    w = np.ones(y.size)
    ml = EvidenceCache(X, w)
    fitted = EvidenceCache(X, w, shares_concentration(np.bincount(y).astype(float)))
    assert ml.labels_evidence(merged, 4) > ml.labels_evidence(y, 4)
    assert fitted.labels_evidence(y, 4) > fitted.labels_evidence(merged, 4)


@pytest.mark.parametrize("seed", range(4))
def test_skewed_leaves_keep_the_labels_term_near_the_ml_one(seed: int) -> None:
    """Leaves of Dirichlet(0.7) shares fit a small concentration, under which merging the two
    lightest clusters still gains at least 90 % of what it gains at the ML shares: the skewed
    stream's judge charges a cut across a heavy cluster as before."""
    shares = np.random.default_rng(100 + seed).dirichlet(np.full(8, 0.7))
    N = np.bincount(np.random.default_rng(seed).choice(8, 3_000, p=shares),
                    minlength=8).astype(float)
    alpha = shares_concentration(N)
    assert alpha < 5
    light = np.argsort(N)
    M = N.copy()
    M[light[1]] += M[light[0]]
    M[light[0]] = 0.0

    def ml(v: np.ndarray) -> float:
        full = v[v > 0]
        return float((full * np.log(full / full.sum())).sum())

    gain_ml = ml(M) - ml(N)
    gain = labels_log_prior(M, alpha) - labels_log_prior(N, alpha)
    assert gain_ml > 0 and 0.9 * gain_ml <= gain <= gain_ml


def test_the_concentration_is_deterministic_and_the_ml_term_is_the_default() -> None:
    """The same leaves give the same α bit for bit; without one, the evidence's labels' term
    is the ML shares' (the evidence of a partition as it was)."""
    W = np.array([36.0, 50.0, 50.0, 43.0, 34.0, 30.0, 27.0, 30.0])
    assert shares_concentration(W) == shares_concentration(W.copy())
    S = np.array([[9.0, 1.0], [1.0, 9.0]])
    N = np.array([10.0, 10.0])
    codes = partition_evidence(S, N, 1e6) - labels_log_prior(N, 1e6)
    assert partition_evidence(S, N) == pytest.approx(codes - 20 * np.log(2), abs=1e-9)
