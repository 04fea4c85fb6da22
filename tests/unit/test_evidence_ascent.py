"""Row moves that climb a partition's evidence (:mod:`streammom.evidence_ascent`)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import gammaln
from sklearn.metrics import adjusted_rand_score

from streammom.datasets import make_hierarchical_bernoulli
from streammom.evidence import EvidenceCache, fit_labels
from streammom.evidence_ascent import ascend_evidence, entering_gains, judge, partition_fit
from streammom.mixture import partition_sums
from streammom.shares_prior import shares_concentration
from streammom.shrinkage import partition_evidence, type_two_prior


def _codes(n: int, seed: int) -> tuple[sp.csr_array, np.ndarray]:
    """A short code stream of the issue's generator: ``n`` events, 8 leaves, 200 codes."""
    X, y, _ = make_hierarchical_bernoulli(n, 200, 8, codes_per_event=10.0, random_state=seed)
    return sp.csr_array(X), y


def _at_fixed_prior(X: sp.csr_array, w: np.ndarray, label: np.ndarray, k: int, alpha: float,
                    prior: tuple[np.ndarray, ...]) -> float:
    """The evidence of ``label`` with every code's Beta prior held at ``prior`` (up to terms
    that no partition changes): the Beta–binomial and Dirichlet–multinomial marginals written
    out directly."""
    held, a, b, tau = prior[:4]
    S, N = partition_sums(X, w, label, k)
    S = S[:, held]
    codes = gammaln(a + S) + gammaln(b + N[:, None] - S) - gammaln(tau + N[:, None])
    return float(codes.sum() + gammaln(N + alpha).sum())


@pytest.mark.parametrize("seed", [0, 1])
def test_a_row_s_gain_is_the_evidence_it_adds_at_the_partition_s_prior(seed: int) -> None:
    """For weighted rows (three distinct weights), the gain of every row's best move is the
    exact change of the evidence at the partition's own type-II priors, computed directly
    from the marginals of the moved partition."""
    rng = np.random.default_rng(seed)
    X = sp.csr_array((rng.random((80, 40)) < 0.2).astype(float))
    w = rng.choice([0.5, 1.0, 2.5], X.shape[0])
    label, k, alpha = rng.integers(0, 4, X.shape[0]), 4, 2.0
    S, N = partition_sums(X, w, label, k)
    prior = type_two_prior(S, N)
    gain, target = entering_gains(X, w, judge(X, w, label, k, alpha), alpha)
    before = _at_fixed_prior(X, w, label, k, alpha, prior)
    moving = np.flatnonzero(target != label)
    assert moving.size > 0 and np.all(gain[moving] > 0) and np.all(gain[target == label] <= 0)
    for i in moving:
        moved = label.copy()
        moved[i] = target[i]
        exact = _at_fixed_prior(X, w, moved, k, alpha, prior) - before
        assert gain[i] == pytest.approx(exact, abs=1e-8)


def test_the_judged_evidence_is_the_evidence_of_the_refinement() -> None:
    """judge's evidence is partition_evidence with the shares' concentration, bit for bit
    (the value the refinement's cache compares)."""
    X, y = _codes(300, 3)
    w = np.ones(y.size)
    alpha = shares_concentration(np.bincount(y).astype(float))
    S, N = partition_sums(X, w, y, 8)
    assert judge(X, w, y, 8, alpha).evidence == partition_evidence(S, N, alpha)
    assert EvidenceCache(X, w, alpha).labels_evidence(y, 8) == judge(X, w, y, 8, alpha).evidence


@pytest.mark.parametrize("seed", [0, 4])
def test_the_climb_mends_a_partition_with_misplaced_rows(seed: int) -> None:
    """The true partition of a 300-event stream with a fifth of its rows sent to a wrong
    component: the climb raises the evidence, keeps all 8 components, stops where no row
    gains by a move, and labels nearer the truth than where it started. Twice the same."""
    X, y = _codes(300, seed)
    w = np.ones(y.size)
    rng = np.random.default_rng(seed)
    start = y.copy()
    wrong = rng.choice(y.size, y.size // 5, replace=False)
    start[wrong] = (y[wrong] + rng.integers(1, 8, wrong.size)) % 8
    alpha = shares_concentration(np.bincount(y).astype(float))
    found, value = ascend_evidence(X, w, start, 8, alpha)
    again = ascend_evidence(X, w, start, 8, alpha)
    assert np.array_equal(found, again[0]) and value == again[1]
    assert value > judge(X, w, start, 8, alpha).evidence
    assert value == judge(X, w, found, 8, alpha).evidence
    assert np.unique(found).size == 8
    gain, _ = entering_gains(X, w, judge(X, w, found, 8, alpha), alpha)
    assert gain.max() <= 0  # a local optimum: no row gains by a move
    assert adjusted_rand_score(y, found) > adjusted_rand_score(y, start) + 0.2


def test_the_climb_never_empties_a_component() -> None:
    """A component of two rows whose codes the others explain better: moving both out would
    raise the evidence, but the climb keeps every component its start labels."""
    X, y = _codes(200, 2)
    w = np.ones(y.size)
    start = np.where(y == 7, 6, y)
    start[:2] = 7  # two stray rows in their own component
    found, _ = ascend_evidence(X, w, start, 8, 5.0)
    assert np.unique(found).size == 8


def test_the_partition_s_fit_labels_its_rows_as_the_partition_does() -> None:
    """partition_fit: posterior-mean rates at the partition's τ and posterior-mean shares; at
    the climb's optimum its MAP labels of the rows are the partition itself, so the scores
    the engine keeps label as the judge chose; a component the partition leaves empty keeps
    share 0 (the model then says the leaf is empty)."""
    X, y = _codes(300, 1)
    w = np.ones(y.size)
    alpha = shares_concentration(np.bincount(y).astype(float))
    found, _ = ascend_evidence(X, w, y, 8, alpha)
    fit = partition_fit(X, w, found, 8, alpha)
    assert np.array_equal(fit_labels(X, fit), found)
    N = np.bincount(found, minlength=8)
    assert np.allclose(fit.weights, (N + alpha) / (N.sum() + 8 * alpha))
    assert fit.n_iter == 0 and fit.prior_strengths is not None
    seven = np.where(found == 7, 6, found)  # component 7 left empty: it keeps share 0
    merged = partition_fit(X, w, seven, 8, alpha)
    assert merged.weights[7] == 0 and merged.weights.sum() == pytest.approx(1.0)
    assert 7 not in fit_labels(X, merged)


def test_rows_of_many_weights_climb_by_the_gains_of_a_few(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A decayed stream's refinement weighs each leaf's rows differently: past GAIN_WEIGHTS
    distinct weights a row's gain is that of a lighter copy (its bucket's least weight), a
    proposal the evidence checks. The climb still mends the misplaced partition, raises its
    evidence and keeps every component, and rows of their bucket's least weight keep their
    exact gains."""
    from streammom import evidence_ascent
    from streammom.evidence_ascent import GAIN_WEIGHTS, gain_weights

    X, y = _codes(300, 0)
    rng = np.random.default_rng(0)
    w = np.linspace(0.5, 2.0, 8)[y]  # one weight a cluster: 8 distinct, past GAIN_WEIGHTS
    assert np.unique(w).size > GAIN_WEIGHTS >= np.unique(gain_weights(w)).size
    assert np.all(gain_weights(w) <= w)
    start = y.copy()
    wrong = rng.choice(y.size, y.size // 5, replace=False)
    start[wrong] = (y[wrong] + rng.integers(1, 8, wrong.size)) % 8
    found, value = ascend_evidence(X, w, start, 8, 5.0)
    assert value > judge(X, w, start, 8, 5.0).evidence and np.unique(found).size == 8
    assert adjusted_rand_score(y, found) > adjusted_rand_score(y, start) + 0.2
    judged = judge(X, w, start, 8, 5.0)
    bucketed, _ = entering_gains(X, w, judged, 5.0)
    least = gain_weights(w) == w
    assert least.any() and (~least).any()
    monkeypatch.setattr(evidence_ascent, "GAIN_WEIGHTS", 64)  # every weight its own
    exact, _ = entering_gains(X, w, judged, 5.0)
    assert np.allclose(bucketed[least], exact[least])
