"""The Bernoulli EM on the columns its rows hold (streammom.held_rates) equals the EM on every
column: the same centres, weights, log-likelihood, iterations and prior strengths."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streammom import held_rates
from streammom.mixture import MixtureEMResult, SumsPrior, fit_mixture_em


def _wide_rows(rng: np.random.Generator, n: int, d: int, k: int) -> sp.csr_array:
    """Rows of k clusters over a twentieth of d columns: each cluster has its own codes."""
    used = rng.choice(d, size=d // 20, replace=False)
    label = rng.integers(0, k, n)
    rates = np.where(rng.random((k, used.size)) < 0.15, 0.5, 0.02)
    dense = (rng.random((n, used.size)) < rates[label]).astype(float)
    X = sp.csr_array(dense)
    return sp.csr_array((X.data, used[X.indices], X.indptr), shape=(n, d))


def _both(X: sp.csr_array, mu0: np.ndarray, w0: np.ndarray, monkeypatch: pytest.MonkeyPatch,
          **kwargs: object) -> tuple[MixtureEMResult, MixtureEMResult]:
    """(the fit on the held columns, the fit on every column) of the same EM."""
    held = fit_mixture_em(X, mu0, w0, family="bernoulli", **kwargs)  # type: ignore[arg-type]
    with monkeypatch.context() as m:
        m.setattr(held_rates, "HELD_SHARE", -1.0)  # no column set is small enough: every column
        full = fit_mixture_em(X, mu0, w0, family="bernoulli", **kwargs)  # type: ignore[arg-type]
    return held, full


def _assert_same(a: MixtureEMResult, b: MixtureEMResult) -> None:
    assert (a.n_iter, a.converged) == (b.n_iter, b.converged)
    np.testing.assert_allclose(a.means, b.means, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.weights, b.weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.history, b.history, rtol=1e-11)
    if b.prior_strengths is None:
        assert a.prior_strengths is None
    else:
        assert a.prior_strengths is not None
        np.testing.assert_allclose(a.prior_strengths, b.prior_strengths, rtol=1e-12)


@pytest.mark.parametrize("variant", ["plain", "shrunk", "pulled strengths", "given strengths",
                                     "annealed", "prior"])
def test_the_em_on_the_held_columns_is_the_em_on_every_column(
        variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    n, d, k = 400, 2_000, 4
    X = _wide_rows(rng, n, d, k)
    assert held_rates.few_held_columns(X) is not None  # the rows hold ≤ a quarter
    # A start with rates on columns no row holds (a tree's routers fitted to other events),
    # and one component without mass: it keeps its start, unheld columns included.
    mu0 = rng.uniform(0.0, 0.3, (k, d))
    w0 = np.array([0.4, 0.3, 0.3, 1e-15])
    kwargs: dict[str, object] = {"tol": 1e-7, "max_iter": 40,
                                 "sample_weight": rng.uniform(0.5, 3.0, n)}
    if variant == "shrunk":
        kwargs["shrink"] = True
    elif variant == "pulled strengths":
        kwargs["shrink"] = "pulled"
    elif variant == "given strengths":
        kwargs["shrink"] = rng.uniform(0.1, 100.0, d)
    elif variant == "annealed":
        kwargs["anneal"] = (0.3, 0.7)
    elif variant == "prior":
        sums = np.zeros((k, d))
        outside = rng.choice(d, 50, replace=False)  # columns the sums hold, the rows maybe not
        sums[:, outside] = rng.uniform(0.0, 5.0, (k, 50))
        kwargs["prior"] = SumsPrior(sums, rng.uniform(5.0, 10.0, k), np.full(k, 0.6))
    held, full = _both(X, mu0, w0, monkeypatch, **kwargs)
    _assert_same(held, full)
    assert held.means.shape == (k, d)
    # The massless component kept its start (tempered passes give it mass, the sums' pseudo-
    # counts too); the others' unheld rates are the clamp.
    unheld = np.setdiff1d(np.arange(d), np.unique(X.indices))
    if variant not in ("annealed", "prior"):
        np.testing.assert_array_equal(held.means[3, unheld], np.clip(mu0[3, unheld], 1e-6, 1))
        assert np.all(held.means[:3, unheld] == held.means[:3, unheld].min())


def test_rows_that_hold_most_columns_take_the_full_em() -> None:
    X = sp.csr_array(np.eye(8, 10))
    assert held_rates.few_held_columns(X) is None
    assert held_rates.few_held_columns(sp.csr_array(np.eye(2, 10))).tolist() == [0, 1]
    sums = np.zeros((2, 10))
    sums[1, 5] = 1.0  # a pseudo-count's column is held too
    assert held_rates.few_held_columns(sp.csr_array(np.eye(2, 20)), np.pad(sums, ((0, 0), (0, 10)))
                                      ).tolist() == [0, 1, 5]


def test_the_pair_direction_on_the_held_columns_is_the_one_in_every_column(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The between-component direction of rows that hold a twentieth of the columns, solved on
    those columns, projects the rows as the solve in R^d does (to Lanczos' tolerance)."""
    from streammom import pair_resplit

    rng = np.random.default_rng(3)
    X = _wide_rows(rng, 300, 4_000, 2)
    assert held_rates.few_held_columns(X) is not None  # a twentieth ≤ a quarter
    weight = rng.uniform(0.5, 2.0, 300)
    held = pair_resplit.between_direction(X, weight, "bernoulli")
    monkeypatch.setattr(held_rates, "HELD_SHARE", -1.0)  # every column
    full = pair_resplit.between_direction(X, weight, "bernoulli")
    assert held is not None and full is not None
    np.testing.assert_allclose(held, full, atol=1e-3 * np.abs(full).max())
    assert np.corrcoef(held, full)[0, 1] > 0.999999


def test_the_pair_direction_of_rows_that_hold_one_code_or_none() -> None:
    """Rows of a wide vocabulary that hold a single code (or none) leave B 1 × 1 (or empty)
    on the held columns, too small for Lanczos. One binary code has no between-component
    variance in B (x² = x: its diagonal term cancels), so there is no direction, as in R^d;
    nor for rows without a code."""
    from streammom import pair_resplit

    one = sp.csr_array((np.ones(3), ([0, 2, 3], [7, 7, 7])), shape=(5, 100))
    assert pair_resplit.between_direction(one, np.ones(5), "bernoulli") is None
    assert pair_resplit.between_direction(sp.csr_array((5, 100)), np.ones(5), "bernoulli") is None
    # Token counts of one term: B = E[x(x − 1)] / E[t(t − 1)] − m̄² is a number, and a
    # positive one gives the rows' deviations from the mean count as the direction.
    counts = sp.csr_array((np.array([2.0, 9.0, 3.0, 8.0]), ([0, 1, 2, 3], [7, 7, 7, 7])),
                          shape=(4, 100))
    side = pair_resplit.between_direction(counts, np.ones(4), "multinomial")
    assert side is None or np.isfinite(side).all()
