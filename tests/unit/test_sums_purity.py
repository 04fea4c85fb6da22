"""The sums' purity (:func:`streammom.stream_sums.sums_purity`): which leaves' sums the fit's
own component explains, for both families, past the candidate bound, on degenerate fits."""

from __future__ import annotations

import numpy as np

from streammom.mixture import MixtureEMResult
from streammom.moments import MomentAccumulator
from streammom.reservoir import Reservoir
from streammom.stream_sums import MIN_AGREEMENT, PURITY_CANDIDATES, sums_purity
from streammom.tree import Node


def _leaf(weight: float, sums: np.ndarray) -> Node:
    acc = MomentAccumulator(sums.size)
    acc.weight, acc.s = weight, np.asarray(sums, dtype=float)
    return Node(0, -1, 0, acc, Reservoir(8, sums.size))


def _components(k: int, d: int, seed: int) -> np.ndarray:
    """k Bernoulli components over d codes: a background and a block of signature codes each."""
    rng = np.random.default_rng(seed)
    mu = rng.uniform(0.005, 0.03, size=(k, d))
    block = d // k
    for j in range(k):
        mu[j, j * block:(j + 1) * block] = rng.uniform(0.3, 0.6, size=block)
    return mu


def test_pure_sums_pass_and_a_mixed_leaf_is_caught_past_the_candidate_bound() -> None:
    k, d = PURITY_CANDIDATES + 8, 800  # the nearest-components restriction in use
    mu = _components(k, d, seed=0)
    fit = MixtureEMResult(mu, np.full(k, 1.0 / k), 0, True, 0.0)
    weight = 1_000.0
    leaves = [_leaf(weight, weight * mu[j]) for j in range(k)]
    assert (sums_purity(fit, leaves, "bernoulli") > 0.99).all()

    mixed = 0.4 * mu[3] + 0.3 * mu[17] + 0.3 * mu[39]  # three clusters' events in leaf 3
    leaves[3] = _leaf(weight, weight * mixed)
    purity = sums_purity(fit, leaves, "bernoulli")
    assert np.flatnonzero(purity < MIN_AGREEMENT).tolist() == [3]
    assert abs(purity[3] - 0.4) < 0.05, purity[3]


def test_counts_are_judged_on_their_normalised_sums() -> None:
    """Multinomial: the mean is s_l / Σ_h s_lh, so a leaf's length does not matter."""
    k, d = 6, 300
    mu = _components(k, d, seed=1)
    mu /= mu.sum(axis=1, keepdims=True)
    fit = MixtureEMResult(mu, np.full(k, 1.0 / k), 0, True, 0.0)
    leaves = [_leaf(50.0, 40.0 * 50.0 * mu[j]) for j in range(k)]  # 40 tokens a document
    leaves[2] = _leaf(50.0, 40.0 * 50.0 * (0.5 * mu[2] + 0.5 * mu[4]))
    purity = sums_purity(fit, leaves, "multinomial")
    assert np.flatnonzero(purity < MIN_AGREEMENT).tolist() == [2]


def test_empty_leaves_and_equal_components_do_not_break_it() -> None:
    """A leaf without weight reads as pure (nothing of it joins); two equal components split a
    leaf's sums between them, and a component of zeros still factors."""
    mu = np.array([[0.6, 0.1, 0.1], [0.6, 0.1, 0.1], [0.0, 0.0, 0.0], [0.1, 0.1, 0.7]])
    fit = MixtureEMResult(mu, np.array([0.3, 0.3, 0.1, 0.3]), 0, True, 0.0)
    leaves = [_leaf(10.0, 10.0 * mu[0]), _leaf(10.0, 10.0 * mu[1]),
              _leaf(0.0, np.zeros(3)), _leaf(10.0, 10.0 * mu[3])]
    purity = sums_purity(fit, leaves, "bernoulli")
    assert np.isfinite(purity).all()
    assert purity[2] == 1.0 and purity[3] > 0.99
    assert purity[0] < MIN_AGREEMENT and purity[1] < MIN_AGREEMENT  # indistinguishable pair
