"""EM for Bernoulli and multinomial mixtures on sparse data."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment
from scipy.special import gammaln

from streammom.mixture import (
    MixtureEMResult,
    corrected_log_likelihood,
    fit_mixture_em,
    log_likelihood_matrix,
    map_assign,
    responsibilities,
)


def _bernoulli_data(rng: np.random.Generator, n: int, means: np.ndarray, weights: np.ndarray):
    labels = rng.choice(len(weights), size=n, p=weights)
    X = (rng.random((n, means.shape[1])) < means[labels]).astype(float)
    return sp.csr_array(X), labels


def _multinomial_data(rng: np.random.Generator, n: int, topics: np.ndarray, weights: np.ndarray,
                      length: tuple[int, int] = (20, 60)):
    labels = rng.choice(len(weights), size=n, p=weights)
    lengths = rng.integers(*length, size=n)
    X = np.stack([rng.multinomial(t, topics[j]) for t, j in zip(lengths, labels, strict=True)])
    return sp.csr_array(X.astype(float)), labels


def _separated_bernoulli(d: int = 30, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    means = np.full((k, d), 0.08)
    block = d // k
    for j in range(k):
        means[j, j * block : (j + 1) * block] = 0.75
    return means, np.array([0.5, 0.3, 0.2])[:k]


def _match(est: np.ndarray, true: np.ndarray) -> np.ndarray:
    cost = ((est[:, None, :] - true[None, :, :]) ** 2).sum(axis=2)
    rows, cols = linear_sum_assignment(cost)
    return rows[np.argsort(cols)]  # est index matched to each true component


def test_log_likelihood_matrix_matches_the_dense_formulas() -> None:
    rng = np.random.default_rng(0)
    mu = rng.uniform(0.05, 0.95, size=(3, 7))
    om = np.array([0.2, 0.3, 0.5])
    X = (rng.random((20, 7)) < 0.4).astype(float)
    L = log_likelihood_matrix(sp.csr_array(X), mu, om, "bernoulli")
    ref = X @ np.log(mu).T + (1 - X) @ np.log1p(-mu).T + np.log(om)
    np.testing.assert_allclose(L, ref, rtol=1e-12)
    np.testing.assert_allclose(log_likelihood_matrix(X, mu, om, "bernoulli"), L)  # dense input

    topics = rng.dirichlet(np.ones(7), size=3)
    C = rng.poisson(2.0, size=(20, 7)).astype(float)
    L = log_likelihood_matrix(sp.csr_array(C), topics, om, "multinomial")
    t = C.sum(axis=1)
    coef = gammaln(t + 1) - gammaln(C + 1).sum(axis=1)
    ref = C @ np.log(topics).T + np.log(om) + coef[:, None]
    np.testing.assert_allclose(L, ref, rtol=1e-12)
    P = responsibilities(C, topics, om, "multinomial")
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_array_equal(map_assign(C, topics, om, "multinomial"), P.argmax(axis=1))


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_em_log_likelihood_never_decreases(family: str) -> None:
    rng = np.random.default_rng(1)
    k, d = 4, 25
    if family == "bernoulli":
        true = rng.uniform(0.02, 0.6, size=(k, d))
        X, _ = _bernoulli_data(rng, 800, true, np.full(k, 0.25))
        init = rng.uniform(0.1, 0.9, size=(k, d))
    else:
        true = rng.dirichlet(np.full(d, 0.3), size=k)
        X, _ = _multinomial_data(rng, 500, true, np.full(k, 0.25), (3, 30))
        init = rng.dirichlet(np.ones(d), size=k)
    w = rng.uniform(0.5, 2.0, size=X.shape[0])
    res = fit_mixture_em(X, init, np.full(k, 0.25), family=family, tol=0.0, max_iter=60,
                         sample_weight=w)
    hist = np.array(res.history)
    assert len(hist) == res.n_iter + 1 == 61
    assert not res.converged
    assert np.all(np.diff(hist) >= -1e-9 * np.abs(hist[:-1]))
    assert hist[-1] > hist[0]
    assert res.log_likelihood == hist[-1]


def test_em_recovers_separated_bernoulli_mixture() -> None:
    rng = np.random.default_rng(2)
    true, weights = _separated_bernoulli()
    X, labels = _bernoulli_data(rng, 3000, true, weights)
    init = np.clip(true + rng.normal(scale=0.15, size=true.shape), 0.0, 1.0)
    res = fit_mixture_em(X, init, np.full(3, 1 / 3), family="bernoulli")
    assert res.converged and res.n_iter < 100
    idx = _match(res.means, true)
    assert np.abs(res.means[idx] - true).max() < 0.06
    np.testing.assert_allclose(res.weights[idx], weights, atol=0.03)
    pred = map_assign(X, res.means, res.weights, "bernoulli")
    assert (idx[labels] == pred).mean() > 0.98


def test_em_recovers_separated_multinomial_mixture() -> None:
    rng = np.random.default_rng(3)
    d, k = 40, 3
    topics = np.full((k, d), 0.2 / d)
    for j in range(k):
        topics[j, j * 13 : (j + 1) * 13] += 0.8 / 13
    topics /= topics.sum(axis=1, keepdims=True)
    weights = np.array([0.2, 0.5, 0.3])
    X, labels = _multinomial_data(rng, 1500, topics, weights)
    init = rng.dirichlet(np.ones(d), size=k) * 0.5 + topics * 0.5
    res = fit_mixture_em(X, init, np.full(k, 1 / 3), family="multinomial")
    assert res.converged
    idx = _match(res.means, topics)
    assert np.abs(res.means[idx] - topics).max() < 0.02
    np.testing.assert_allclose(res.weights[idx], weights, atol=0.03)
    np.testing.assert_allclose(res.means.sum(axis=1), 1.0)
    assert (idx[labels] == map_assign(X, res.means, res.weights, "multinomial")).mean() > 0.99


def test_empty_component_keeps_its_parameters_and_stays_finite() -> None:
    rng = np.random.default_rng(4)
    true, weights = _separated_bernoulli()
    X, _ = _bernoulli_data(rng, 1000, true, weights)
    far = np.full(30, 1e-6)
    far[:3] = 1.0 - 1e-6  # features 0-2 are present *and* 3+ absent: no row looks like this
    init = np.vstack([true, far])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = fit_mixture_em(X, init, np.array([0.3, 0.3, 0.3, 0.1]), family="bernoulli")
        assert np.isfinite(res.means).all() and np.isfinite(res.weights).all()
        assert np.isfinite(res.log_likelihood)
        np.testing.assert_array_equal(res.means[3], far)
        assert res.weights[3] < 1e-12
        assert res.weights.sum() == pytest.approx(1.0)
        # a component with weight exactly 0 is harmless as well
        res0 = fit_mixture_em(X, init, np.array([0.5, 0.3, 0.2, 0.0]), family="bernoulli")
        assert res0.weights[3] == 0.0 and np.isfinite(res0.log_likelihood)
        P = responsibilities(X, res0.means, res0.weights, "bernoulli")
        assert np.isfinite(P).all() and (P[:, 3] == 0).all()


def test_em_is_deterministic_and_weights_act_as_replication() -> None:
    rng = np.random.default_rng(5)
    true, weights = _separated_bernoulli()
    X, _ = _bernoulli_data(rng, 400, true, weights)
    init = np.clip(true + rng.normal(scale=0.1, size=true.shape), 0, 1)
    a = fit_mixture_em(X, init, weights, family="bernoulli", tol=1e-8)
    b = fit_mixture_em(X, init, weights, family="bernoulli", tol=1e-8)
    assert a.means.tobytes() == b.means.tobytes() and a.n_iter == b.n_iter
    counts = rng.integers(1, 4, size=X.shape[0])
    rep = sp.csr_array(np.repeat(X.toarray(), counts, axis=0))
    c = fit_mixture_em(X, init, weights, family="bernoulli", tol=1e-10, max_iter=500,
                       sample_weight=counts.astype(float))
    r = fit_mixture_em(rep, init, weights, family="bernoulli", tol=1e-10, max_iter=500)
    np.testing.assert_allclose(c.means, r.means, atol=1e-9)
    np.testing.assert_allclose(c.weights, r.weights, atol=1e-9)
    assert c.log_likelihood == pytest.approx(r.log_likelihood, rel=1e-10)


def test_em_input_validation() -> None:
    X = sp.csr_array(np.array([[1.0, 0.0], [0.0, 1.0]]))
    mu = np.array([[0.5, 0.5], [0.4, 0.6]])
    with pytest.raises(ValueError, match="binary"):
        fit_mixture_em(X * 2, mu, [0.5, 0.5], family="bernoulli")
    with pytest.raises(ValueError, match="features"):
        fit_mixture_em(X, mu[:, :1], [0.5, 0.5], family="bernoulli")
    with pytest.raises(ValueError, match="weights"):
        fit_mixture_em(X, mu, [0.5, 0.3, 0.2], family="bernoulli")
    with pytest.raises(ValueError, match="weights"):
        fit_mixture_em(X, mu, [-0.5, 1.5], family="bernoulli")
    with pytest.raises(ValueError, match="family"):
        fit_mixture_em(X, mu, [0.5, 0.5], family="poisson")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NaN"):
        fit_mixture_em(np.array([[np.nan, 1.0]]), mu, [0.5, 0.5], family="bernoulli")


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_one_compiled_em_pass_is_the_e_step_and_the_m_step_sums(family: str) -> None:
    """em_pass gives Σ w log p(x), Σ w r and Xᵀ(w ∘ r) of the dense formulas (eq. 4.1 / 3.4),
    with a component of weight 0 and an empty row among the rows."""
    from streammom import _kernels
    from streammom.mixture import _row_constant, log_linear_params, prepare_parameters

    rng = np.random.default_rng(7)
    k, d = 4, 30
    if family == "bernoulli":
        X, _ = _bernoulli_data(rng, 300, rng.uniform(0.05, 0.5, (k, d)), np.full(k, 0.25))
        mu = rng.uniform(0.1, 0.9, (k, d))
    else:
        X, _ = _multinomial_data(rng, 300, rng.dirichlet(np.ones(d), k), np.full(k, 0.25))
        mu = rng.dirichlet(np.ones(d), k)
    X = X.tolil()
    X[5, :] = 0.0
    X = sp.csr_array(X)
    w = rng.uniform(0.5, 2.0, X.shape[0])
    mu, om = prepare_parameters(mu, [0.5, 0.3, 0.2, 0.0], family)
    A, b = log_linear_params(mu, om, family)
    const = _row_constant(X, family)
    ST, nk = np.zeros((d, k)), np.zeros(k)
    ll = _kernels.em_pass(X.indptr, X.indices, X.data, w, np.ascontiguousarray(A.T), b, const,
                          ST, nk)

    L = log_likelihood_matrix(X, mu, om, family)  # joint log p(x_i, j), dense formula
    top = L.max(axis=1)
    log_px = top + np.log(np.exp(L - top[:, None]).sum(axis=1))
    R = responsibilities(X, mu, om, family)
    assert ll == pytest.approx(float(w @ log_px), rel=1e-12)
    np.testing.assert_allclose(nk, (w[:, None] * R).sum(axis=0), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(ST, X.T @ (w[:, None] * R), rtol=1e-10, atol=1e-12)
    assert nk[3] == 0.0 and not ST[:, 3].any()  # weight 0: no responsibility


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_an_annealed_pass_is_an_em_step_with_tempered_responsibilities(family: str) -> None:
    """r_ij ∝ (ω_j p(x_i | j))^β, then the usual M-step (Ueda & Nakano 1998, eq. 12)."""
    rng = np.random.default_rng(11)
    if family == "bernoulli":
        true, weights = _separated_bernoulli()
        X, _ = _bernoulli_data(rng, 300, true, weights)
        init = np.clip(true + rng.normal(scale=0.1, size=true.shape), 0.05, 0.95)
    else:
        true = rng.dirichlet(np.ones(20), size=3)
        weights = np.array([0.5, 0.3, 0.2])
        X, _ = _multinomial_data(rng, 300, true, weights)
        init = rng.dirichlet(np.ones(20), size=3)
    beta = 0.4
    L = log_likelihood_matrix(X, init, weights, family)
    R = np.exp(beta * (L - L.max(axis=1, keepdims=True)))
    R /= R.sum(axis=1, keepdims=True)
    S = R.T @ X.toarray()
    expected = S / (R.sum(axis=0)[:, None] if family == "bernoulli" else S.sum(axis=1,
                                                                               keepdims=True))
    res = fit_mixture_em(X, init, weights, family=family, max_iter=0, anneal=[beta])
    np.testing.assert_allclose(res.means, np.clip(expected, 1e-6, 1 - 1e-6), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(res.weights, R.mean(axis=0), rtol=1e-9)
    assert res.n_iter == 0 and len(res.history) == 1  # the tempered passes are not EM steps
    plain = fit_mixture_em(X, init, weights, family=family)
    assert plain.means.tobytes() == fit_mixture_em(X, init, weights, family=family,
                                                   anneal=()).means.tobytes()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_annealing_leaves_the_local_optimum_of_a_poor_start(seed: int) -> None:
    """From a random partition of 500 events of an 8-leaf code stream, plain EM stops in a
    local optimum; the same start annealed ends more likely, and clusters better."""
    from sklearn.metrics import adjusted_rand_score

    from streammom.datasets import make_hierarchical_bernoulli
    from streammom.mixture import partition_sums
    from streammom.refine import ANNEAL_BETAS

    X, y, _ = make_hierarchical_bernoulli(500, 500, 8, random_state=seed)
    label = np.random.default_rng(seed).integers(0, 8, 500)
    sums, mass = partition_sums(X, np.ones(500), label, 8)
    mu, pi = sums / mass[:, None], mass / mass.sum()
    plain = fit_mixture_em(X, mu, pi, family="bernoulli")
    annealed = fit_mixture_em(X, mu, pi, family="bernoulli", anneal=ANNEAL_BETAS)
    again = fit_mixture_em(X, mu, pi, family="bernoulli", anneal=ANNEAL_BETAS)
    assert annealed.means.tobytes() == again.means.tobytes()
    assert annealed.log_likelihood > plain.log_likelihood + 100  # 530–930 nats on seeds 0–4

    def ari(fit: MixtureEMResult) -> float:
        return adjusted_rand_score(y, map_assign(X, fit.means, fit.weights, "bernoulli"))

    assert ari(annealed) > ari(plain)


@pytest.mark.parametrize("anneal", [[0.0], [1.5], [0.5, float("nan")], [-0.3]])
def test_anneal_takes_inverse_temperatures_in_the_unit_interval(anneal: list[float]) -> None:
    X = sp.csr_array(np.array([[1.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="anneal"):
        fit_mixture_em(X, [[0.5, 0.5], [0.4, 0.6]], [0.5, 0.5], family="bernoulli",
                       anneal=anneal)


def test_a_sums_prior_adds_pseudo_counts_to_every_m_step() -> None:
    """λ = 1 everywhere: the prior weighs nothing and EM is the plain one, bit for bit; λ = 0:
    one M-step returns the prior's own means and shares, whatever the rows say; in between,
    the means lie between the rows' and the prior's."""
    from streammom.mixture import SumsPrior

    rng = np.random.default_rng(3)
    X = sp.csr_array((rng.random((300, 12)) < 0.3).astype(float))
    mu0 = np.full((2, 12), 0.3)
    mu0[1, :6] = 0.6
    pi0 = np.array([0.5, 0.5])
    sums = np.vstack([np.full(12, 20.0), np.full(12, 80.0)])
    mass = np.array([100.0, 100.0])
    plain = fit_mixture_em(X, mu0, pi0, family="bernoulli", tol=0.0, max_iter=3)
    same = fit_mixture_em(X, mu0, pi0, family="bernoulli", tol=0.0, max_iter=3,
                          prior=SumsPrior(sums, mass, np.ones(2)))
    assert np.array_equal(plain.means, same.means) and np.array_equal(plain.weights,
                                                                      same.weights)
    only = fit_mixture_em(X, mu0, pi0, family="bernoulli", tol=0.0, max_iter=1,
                          prior=SumsPrior(sums, mass, np.zeros(2)))
    np.testing.assert_allclose(only.means, sums / mass[:, None])
    np.testing.assert_allclose(only.weights, [0.5, 0.5])
    half = fit_mixture_em(X, mu0, pi0, family="bernoulli", tol=0.0, max_iter=1,
                          prior=SumsPrior(sums, mass, np.full(2, 0.5)))
    rows_only = fit_mixture_em(X, mu0, pi0, family="bernoulli", tol=0.0, max_iter=1)
    low = np.minimum(rows_only.means, only.means) - 1e-12
    high = np.maximum(rows_only.means, only.means) + 1e-12
    assert ((half.means >= low) & (half.means <= high)).all()


def test_the_optimism_of_equal_weights_is_the_aic_and_grows_with_the_rows_weight() -> None:
    """Equal weights: p · k (p the features the rows hold plus the share; AIC), the same for
    every fit of k components on those rows. Rows that stand for c events each: c times it."""
    rng = np.random.default_rng(3)
    means, weights = _separated_bernoulli(d=30, k=3)
    X, _ = _bernoulli_data(rng, 600, means, weights)
    p = int(np.count_nonzero(np.bincount(X.indices, minlength=30))) + 1

    def optimism(fit: MixtureEMResult, w: np.ndarray) -> float:
        return fit.log_likelihood - corrected_log_likelihood(X, fit, "bernoulli",
                                                             sample_weight=w)

    ones, fours = np.ones(600), np.full(600, 4.0)
    one = fit_mixture_em(X, means, weights, family="bernoulli", sample_weight=ones)
    other = fit_mixture_em(X, means[::-1], weights, family="bernoulli", max_iter=3)
    heavy = fit_mixture_em(X, means, weights, family="bernoulli", sample_weight=fours)
    assert optimism(one, ones) == pytest.approx(3 * p)
    assert optimism(other, ones) == pytest.approx(3 * p)
    assert optimism(heavy, fours) == pytest.approx(4 * 3 * p)


def test_the_optimism_weighs_each_component_by_its_rows_weight() -> None:
    """Two clusters, one's rows standing for 9 events each: the optimism is p · (9 + 1) when
    a component holds each; a component that holds no row adds nothing."""
    means = np.array([[0.9] * 5 + [0.05] * 5, [0.05] * 5 + [0.9] * 5])
    rng = np.random.default_rng(0)
    X, labels = _bernoulli_data(rng, 400, means, np.array([0.5, 0.5]))
    w = np.where(labels == 0, 9.0, 1.0)
    fit = fit_mixture_em(X, means, [0.5, 0.5], family="bernoulli", sample_weight=w)
    empty = fit_mixture_em(X, np.vstack([means, [[0.5] * 10]]), [0.5, 0.5 - 1e-12, 1e-12],
                           family="bernoulli", sample_weight=w, max_iter=0)
    for f in (fit, empty):
        got = f.log_likelihood - corrected_log_likelihood(X, f, "bernoulli", sample_weight=w)
        assert got == pytest.approx(11 * 10.0, rel=1e-3)
