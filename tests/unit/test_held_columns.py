"""Work on the columns a block of rows holds (streammom.held_columns): the spectral restart,
a child's starting basis and a row-held node's eigen-solve computed on those columns give the
full computation's result, at a cost in the held columns instead of the vocabulary."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streammom.decompose import asvtd
from streammom.eigen import NodeEigensolver
from streammom.held_columns import held_columns, scatter_rows
from streammom.mixture import fit_mixture_em
from streammom.refine import spectral_restart
from streammom.spectral import valid_parameters


def _rows_on_a_share_of_a_wide_vocabulary(family: str, n: int = 600, d: int = 900,
                                          seed: int = 0) -> sp.csr_array:
    """Three clusters of documents whose words fall on 240 of d columns, spread among the
    others (the rest of the vocabulary is never used by these rows)."""
    rng = np.random.default_rng(seed)
    used = np.sort(rng.choice(d, size=240, replace=False))
    profiles = rng.dirichlet(np.full(240, 0.3), size=3)
    label = rng.integers(0, 3, size=n)
    if family == "bernoulli":
        dense = rng.random((n, 240)) < np.minimum(1.0, 40 * profiles[label])
        X = dense.astype(float)
    else:
        X = np.stack([rng.multinomial(30, profiles[j]) for j in label]).astype(float)
    full = np.zeros((n, d))
    full[:, used] = X
    return sp.csr_array(full)


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_the_decomposition_on_the_held_columns_is_the_decomposition_on_all(
        family: str) -> None:
    X = _rows_on_a_share_of_a_wide_vocabulary(family)
    w = np.random.default_rng(1).uniform(0.5, 2.0, X.shape[0])
    held, cols = held_columns(X)
    assert 200 < cols.size <= 240 and (held.toarray() == X.toarray()[:, cols]).all()
    assert not X.toarray()[:, np.setdiff1d(np.arange(X.shape[1]), cols)].any()
    on_all = asvtd(X, 3, family, w)
    on_held = asvtd(held, 3, family, w)
    np.testing.assert_allclose(scatter_rows(on_held.centers, cols, X.shape[1]),
                               on_all.centers, atol=1e-9)
    np.testing.assert_allclose(on_held.weights, on_all.weights, atol=1e-9)
    assert cols[on_held.slice_index] == on_all.slice_index

    # so the stream's restart (which decomposes the held columns) is the full restart
    means, weights = valid_parameters(on_all, family)
    full = fit_mixture_em(X, means, weights, family=family, tol=1e-6, max_iter=30,
                          sample_weight=w)
    restart = spectral_restart(X, w, 3, family, max_iter=30, tol=1e-6, random_state=0)
    assert restart is not None
    np.testing.assert_allclose(restart.means, full.means, atol=1e-8)
    assert restart.log_likelihood == pytest.approx(full.log_likelihood, rel=1e-10)


def test_a_restart_needs_k_held_columns() -> None:
    X = sp.csr_array(np.kron(np.eye(2), np.ones((50, 1))).astype(float))  # 2 columns used
    wide = sp.csr_array(sp.hstack([X, sp.csr_array((100, 500))]))
    assert spectral_restart(wide, np.ones(100), 3, "bernoulli", max_iter=5, tol=1e-4,
                            random_state=0) is None


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_a_row_held_node_s_eigenpairs_are_the_full_operator_s(family: str) -> None:
    X = _rows_on_a_share_of_a_wide_vocabulary(family, seed=2)
    w = np.random.default_rng(3).uniform(0.5, 2.0, X.shape[0])
    s = X.T @ w
    dense = (X.T @ (w[:, None] * X.toarray()))
    if family == "multinomial":
        dense -= np.diag(s)
    dense /= w.sum()
    exact_vals, exact_vecs = np.linalg.eigh(dense)
    solver = NodeEigensolver(random_state=0, basis_dim=8, family=family)
    vals, vecs = solver.rows_top_eigenpairs(X, w, s if family == "multinomial" else None,
                                            float(w.sum()), 8, None, nid=5)
    assert vecs.shape == (X.shape[1], 8)
    np.testing.assert_allclose(vals[:2], exact_vals[::-1][:2], rtol=1e-5)
    # the leading eigenvectors, on the held columns only
    overlap = np.abs(exact_vecs[:, ::-1][:, :2].T @ vecs[:, :2])
    np.testing.assert_allclose(np.diag(overlap), 1.0, atol=1e-4)
    _, cols = held_columns(X)
    assert not vecs[np.setdiff1d(np.arange(X.shape[1]), cols)].any()


def test_a_child_basis_spans_the_top_eigenvectors_of_its_rows() -> None:
    X = _rows_on_a_share_of_a_wide_vocabulary("multinomial", seed=4)
    colsum = np.asarray(X.sum(axis=0)).ravel()
    G = (X.T @ X).toarray() - np.diag(colsum)
    top = np.linalg.eigh(G)[1][:, ::-1][:, :2]
    solver = NodeEigensolver(random_state=0, basis_dim=8, family="multinomial")
    P = solver.basis_from_rows(X, nid=7, d=X.shape[1])
    assert P.shape == (X.shape[1], 8)
    np.testing.assert_allclose(P.T @ P, np.eye(8), atol=1e-10)
    # the top eigenvectors lie in span(P): their residual outside it is small
    assert np.linalg.norm(top - P @ (P.T @ top)) < 1e-2
    # and the basis is a function of the seed: the same call gives the same bytes
    assert solver.basis_from_rows(X, nid=7, d=X.shape[1]).tobytes() == P.tobytes()


def test_a_stream_on_a_wide_vocabulary_clusters_its_few_columns_and_replays() -> None:
    """End to end, the refits on their held columns: documents of 4 topics on 400 of
    30,000 columns (scattered), at the defaults. The topics are found, and the same events
    give the same snapshot bytes."""
    import hashlib

    from sklearn.metrics import adjusted_rand_score

    from streammom import StreamingHierarchy

    rng = np.random.default_rng(7)
    d, n = 30_000, 3_000
    used = np.sort(rng.choice(d, size=400, replace=False))
    topics = rng.dirichlet(np.full(400, 0.1), size=4)
    label = rng.integers(0, 4, size=n)
    counts = np.stack([rng.multinomial(40, topics[j]) for j in label]).astype(float)
    X = sp.csr_array((counts[counts > 0], used[np.nonzero(counts)[1]],
                      np.concatenate(([0], np.cumsum((counts > 0).sum(axis=1))))),
                     shape=(n, d))

    def run() -> tuple[np.ndarray, str]:
        eng = StreamingHierarchy(d, max_leaves=4)
        for a in range(0, n, 1_000):
            eng.partial_fit(X[a:a + 1_000])
        return eng.predict(X), hashlib.sha256(eng.snapshot()).hexdigest()

    labels, digest = run()
    assert adjusted_rand_score(label, labels) > 0.95
    assert run()[1] == digest
