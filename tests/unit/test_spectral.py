"""SpectralMixture: SVTD/ASVTD/Jacobi + EM, scikit-learn style."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from streammom import SpectralMixture
from streammom.decompose import NonPositiveEigenvalueError


def _thesis_bernoulli(n: int, d: int, k: int, seed: int):
    """Thesis §4.5 reference generator (digest part 1 §5.7)."""
    rng = np.random.default_rng(seed)
    M = rng.exponential(scale=10.0, size=(d, k))
    M = M / (1.0 + M.max())
    omega = rng.uniform(size=k)
    omega /= omega.sum()
    labels = rng.choice(k, size=n, p=omega)
    X = (rng.random((n, d)) < M[:, labels].T).astype(float)
    return sp.csr_array(X), labels


def _topics(n: int, seed: int):
    rng = np.random.default_rng(seed)
    d, k = 30, 3
    topics = rng.dirichlet(np.full(d, 0.2), size=k)
    weights = np.array([0.5, 0.3, 0.2])
    labels = rng.choice(k, size=n, p=weights)
    lengths = rng.integers(5, 40, size=n)
    X = np.stack([rng.multinomial(t, topics[j]) for t, j in zip(lengths, labels, strict=True)])
    return sp.csr_array(X.astype(float)), labels, topics


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_asvtd_em_clusters_the_thesis_bernoulli_mixture(seed: int) -> None:
    X, labels = _thesis_bernoulli(3000, 99, 8, seed)
    model = SpectralMixture(8).fit(X)
    assert adjusted_rand_score(labels, model.predict(X)) >= 0.85
    assert model.means_.shape == (8, 99) and model.weights_.shape == (8,)
    assert np.all(np.diff(model.weights_) <= 0)  # canonical order: weight descending
    assert np.all(np.diff(model.em_history_) >= -1e-9 * np.abs(model.em_history_[0]))


def test_fits_are_byte_identical_and_sparse_equals_dense() -> None:
    X, _ = _thesis_bernoulli(1500, 40, 5, 11)
    a = SpectralMixture(5).fit(X)
    b = SpectralMixture(5).fit(X)
    c = SpectralMixture(5).fit(X.toarray())
    d = SpectralMixture(5).fit(sp.csc_matrix(X))
    for other in (b, c, d):
        assert a.means_.tobytes() == other.means_.tobytes()
        assert a.weights_.tobytes() == other.weights_.tobytes()
        assert a.n_iter_ == other.n_iter_
    np.testing.assert_array_equal(a.predict(X), a.predict(X.toarray()))
    P = a.predict_proba(X)
    assert P.shape == (1500, 5)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(P.argmax(axis=1), a.predict(X))
    np.testing.assert_array_equal(a.fit_predict(X), a.predict(X))
    assert a.score(X) == pytest.approx(a.log_likelihood_ / X.shape[0], rel=1e-12)


def test_svtd_asvtd_and_jacobi_paths() -> None:
    X, labels = _thesis_bernoulli(2000, 30, 4, 21)
    asv = SpectralMixture(4, method="asvtd", em=False).fit(X)
    exp = SpectralMixture(4, method="svtd", em=False).fit(X)
    # the implicit and explicit moment paths give the same decomposition
    np.testing.assert_allclose(asv.decomposition_.centers, exp.decomposition_.centers,
                               atol=1e-10)
    np.testing.assert_allclose(asv.means_, exp.means_, atol=1e-10)
    assert asv.n_iter_ == 0 and not asv.converged_
    jac = SpectralMixture(4, method="jacobi").fit(X)
    assert jac.decomposition_.slice_index >= 0
    assert adjusted_rand_score(labels, jac.predict(X)) > 0.8
    with pytest.raises(ValueError, match="asvtd"):
        SpectralMixture(2, method="svtd").fit(sp.random(50, 201, density=0.1, format="csr",
                                                        data_rvs=np.ones, random_state=0))


def test_multinomial_topics() -> None:
    X, labels, topics = _topics(1500, 5)
    model = SpectralMixture(3, family="multinomial").fit(X)
    assert adjusted_rand_score(labels, model.predict(X)) > 0.9
    np.testing.assert_allclose(model.means_.sum(axis=1), 1.0)
    assert model.means_.min() > 0
    # moment estimate alone is already in the valid range (simplex per topic)
    np.testing.assert_allclose(model.moment_means_.sum(axis=1), 1.0)
    err = np.abs(model.means_[:, None, :] - topics[None, :, :]).sum(axis=2).min(axis=0)
    assert err.max() < 0.3  # L1 distance of each true topic to its nearest estimate


def test_input_validation() -> None:
    X, _ = _thesis_bernoulli(200, 10, 2, 0)
    model = SpectralMixture(2).fit(X)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((3, 11)))
    bad = X.toarray()
    bad[0, 0] = -1.0
    with pytest.raises(ValueError, match="negative"):
        SpectralMixture(2).fit(bad)
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SpectralMixture(2).fit(bad)
    with pytest.raises(ValueError, match="NaN"):
        model.predict_proba(bad)
    with pytest.raises(ValueError, match="binary"):
        SpectralMixture(2, family="bernoulli").fit(X * 3)
    with pytest.raises(ValueError, match="n_components"):
        SpectralMixture(11).fit(X)
    with pytest.raises(ValueError, match="n_components"):
        SpectralMixture(0).fit(X)
    with pytest.raises(ValueError, match="method"):
        SpectralMixture(2, method="tpm").fit(X)
    with pytest.raises(ValueError, match="family"):
        SpectralMixture(2, family="poisson").fit(X)
    with pytest.raises(TypeError):
        SpectralMixture(2, random_state=None).fit(X)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="fit"):
        SpectralMixture(2).predict(X)
    with pytest.raises(ValueError):
        SpectralMixture(2).fit(np.ones(5))


def test_too_many_components_names_k() -> None:
    rng = np.random.default_rng(0)
    patterns = (rng.random((3, 15)) < 0.5).astype(float)
    X = patterns[rng.integers(0, 3, size=300)]
    with pytest.raises(NonPositiveEigenvalueError, match="k=5"):
        SpectralMixture(5).fit(X)


def test_sklearn_params_protocol() -> None:
    model = SpectralMixture(3, family="multinomial", tol=1e-3)
    params = model.get_params()
    assert params["n_components"] == 3 and params["family"] == "multinomial"
    assert model.set_params(max_iter=7).max_iter == 7
    assert "max_iter=7" in repr(model)
    with pytest.raises(ValueError):
        model.set_params(bogus=1)
    from sklearn.base import clone

    cloned = clone(model)
    assert cloned.get_params() == model.get_params()
