"""SVTD / ASVTD, the implicit whitened slices, the exact SIDIWO rotation and Jacobi sweeps."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streammom.decompose import (
    NonPositiveEigenvalueError,
    asvtd,
    jacobi_joint_diagonalize,
    sidiwo_objective,
    sidiwo_rotation,
    svtd,
    top_eigenpairs,
    whiten,
)
from streammom.estimators import explicit_moments, implicit_moments

# ------------------------------------------------------------------------------- helpers


def _population(rng: np.random.Generator, d: int, k: int, *, simplex: bool = False):
    M = rng.uniform(0.05, 0.95, size=(d, k))
    if simplex:
        M /= M.sum(axis=0, keepdims=True)
    w = rng.uniform(0.2, 1.0, size=k)
    w /= w.sum()
    M1 = M @ w
    M2 = (M * w) @ M.T
    M3 = np.einsum("aj,bj,cj,j->abc", M, M, M, w)
    return M, w, M1, M2, M3


def _best_permutation_error(est: np.ndarray, M: np.ndarray) -> tuple[float, tuple[int, ...]]:
    """max-abs error of est (d, k) against M (d, k) over all column permutations (k ≤ 6)."""
    k = M.shape[1]
    assert k <= 6
    best = min(
        (float(np.abs(est[:, list(p)] - M).max()), p) for p in itertools.permutations(range(k))
    )
    return best


def _raw_m3(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.einsum("n,na,nb,nc->abc", w, X, X, X) / w.sum()


def _single_topic_m3_entrywise(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Thesis Thm 3.2.1 entry by entry: factorial moments over distinct positions / T3."""
    d = X.shape[1]
    t = X.sum(axis=1)
    T3 = w @ (t * np.maximum(t - 1, 0) * np.maximum(t - 2, 0))
    out = np.empty((d, d, d))
    for a, b, c in itertools.product(range(d), repeat=3):
        if a == b == c:
            v = X[:, a] * (X[:, a] - 1) * (X[:, a] - 2)
        elif a == b:
            v = X[:, a] * (X[:, a] - 1) * X[:, c]
        elif b == c:
            v = X[:, a] * X[:, b] * (X[:, b] - 1)
        elif a == c:
            v = X[:, a] * (X[:, a] - 1) * X[:, b]
        else:
            v = X[:, a] * X[:, b] * X[:, c]
        out[a, b, c] = w @ v
    return out / T3


def _single_topic_m2_entrywise(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    t = X.sum(axis=1)
    T2 = w @ (t * np.maximum(t - 1, 0))
    C = np.einsum("n,na,nb->ab", w, X, X)
    C[np.diag_indices_from(C)] -= X.T @ w
    return C / T2


# ------------------------------------------------------------------------------- SVTD exactness


@pytest.mark.parametrize(("d", "k"), [(12, 3), (12, 4), (9, 6)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_svtd_recovers_population_parameters(d: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(1000 * d + 10 * k + seed)
    M, w, M1, M2, M3 = _population(rng, d, k)
    for kwargs in (
        {"slice_criterion": "relative"},
        {"slice_criterion": "absolute"},
        {"rotation": "jacobi"},
    ):
        res = svtd(M1, M2, M3, k, **kwargs)
        err, perm = _best_permutation_error(res.centers, M)
        assert err < 1e-10, kwargs
        np.testing.assert_allclose(res.weights[list(perm)], w, atol=1e-10)
        np.testing.assert_allclose(res.weights_lstsq[list(perm)], w, atol=1e-10)
        np.testing.assert_allclose(res.means, res.centers.T)
        np.testing.assert_allclose(res.rotation.T @ res.rotation, np.eye(k), atol=1e-12)


def test_svtd_accepts_a_slice_function_and_topics() -> None:
    rng = np.random.default_rng(7)
    M, _, M1, M2, M3 = _population(rng, 12, 4, simplex=True)
    calls: list[int] = []

    def slice_fn(r: int) -> np.ndarray:
        calls.append(r)
        return M3[r]

    res = svtd(M1, M2, slice_fn, 4)
    assert sorted(calls) == list(range(12))
    err, _ = _best_permutation_error(res.centers, M)
    assert err < 1e-10
    dense = svtd(M1, M2, M3, 4)
    np.testing.assert_allclose(res.centers, dense.centers, atol=1e-13)


def test_svtd_rejects_bad_shapes() -> None:
    rng = np.random.default_rng(0)
    _, _, M1, M2, M3 = _population(rng, 8, 3)
    with pytest.raises(ValueError):
        svtd(M1, M2[:5, :5], M3, 3)
    with pytest.raises(ValueError):
        svtd(M1, M2, M3[:, :, :4], 3)
    with pytest.raises(ValueError):
        svtd(M1, M2, M3, 3, rotation="bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        svtd(M1, M2, M3, 3, slice_criterion="bogus")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- implicit slices


def _binary_data(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    return (rng.random((n, d)) < rng.uniform(0.05, 0.6, size=d)).astype(float)


def _count_data(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    X = rng.poisson(rng.uniform(0.1, 1.5, size=d), size=(n, d)).astype(float)
    X[:5] = 0.0  # empty documents
    X[5, 0] = 2.0  # a 2-token document: contributes to M2, not to M3
    X[5, 1:] = 0.0
    return X


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
@pytest.mark.parametrize("weighted", [False, True])
def test_implicit_slices_equal_explicit_dense_m3(family: str, weighted: bool) -> None:
    rng = np.random.default_rng(11 if family == "bernoulli" else 12)
    n, d, k = 300, 9, 3
    X = _binary_data(rng, n, d) if family == "bernoulli" else _count_data(rng, n, d)
    w = rng.uniform(0.2, 3.0, size=n) if weighted else np.ones(n)
    if family == "bernoulli":
        M3 = _raw_m3(X, w)
        M2 = np.einsum("n,na,nb->ab", w, X, X) / w.sum()
        M1 = X.T @ w / w.sum()
    else:
        M3 = _single_topic_m3_entrywise(X, w)
        M2 = _single_topic_m2_entrywise(X, w)
        M1 = X.T @ w / (w @ X.sum(axis=1))
    mom = implicit_moments(sp.csr_array(X), family, w if weighted else None)
    np.testing.assert_allclose(mom.m1, M1, atol=1e-14)
    np.testing.assert_allclose(mom.m2_dense(), M2, atol=1e-13)
    np.testing.assert_allclose(mom.m2_operator() @ np.eye(d), M2, atol=1e-13)
    m1e, m2e, m3e = explicit_moments(sp.csr_array(X), family, w if weighted else None)
    np.testing.assert_allclose(m1e, M1, atol=1e-14)
    np.testing.assert_allclose(m3e, M3, atol=1e-13)
    np.testing.assert_allclose(m2e, M2, atol=1e-13)

    wh = whiten(M2, k)
    H_implicit = mom.whitened_slices(wh.pinv)
    H_explicit = np.einsum("ia,rab,jb->rij", wh.pinv, M3, wh.pinv)
    assert H_implicit.shape == (d, k, k)
    np.testing.assert_allclose(H_implicit, H_explicit, atol=1e-10)

    # vectorised row extraction = diagonals of Oᵀ H_r O for any orthogonal O
    rot, _ = np.linalg.qr(rng.normal(size=(k, k)))
    rows = mom.rows(wh.pinv, rot)
    np.testing.assert_allclose(rows, np.einsum("aj,rab,bj->rj", rot, H_explicit, rot),
                               atol=1e-10)

    # the whole ASVTD equals SVTD on the explicit moments of the same data
    implicit = asvtd(sp.csr_array(X), k, family, w if weighted else None)
    explicit = svtd(M1, M2, M3, k)
    np.testing.assert_allclose(implicit.centers, explicit.centers, atol=1e-10)
    np.testing.assert_allclose(implicit.weights, explicit.weights, atol=1e-10)
    assert implicit.slice_index == explicit.slice_index


def test_large_d_uses_the_matrix_free_m2() -> None:
    rng = np.random.default_rng(9)
    n, d, k = 400, 450, 3
    labels = rng.integers(0, k, size=n)
    P = np.full((k, d), 0.02)
    for j in range(k):
        P[j, j * 40 : (j + 1) * 40] = 0.6
    X = sp.csr_array((rng.random((n, d)) < P[labels]).astype(float))
    mom = implicit_moments(X)
    op = mom.m2()
    assert not isinstance(op, np.ndarray)
    dense = whiten(mom.m2_dense(), k)
    lanczos = whiten(op, k)
    np.testing.assert_allclose(lanczos.eigenvalues, dense.eigenvalues, rtol=1e-8)
    # same subspace (signs are canonical, so same vectors)
    np.testing.assert_allclose(np.abs(lanczos.eigenvectors.T @ dense.eigenvectors), np.eye(k),
                               atol=1e-6)
    res = asvtd(X, k)
    assert res.centers.shape == (d, k)


def test_multinomial_needs_three_token_documents() -> None:
    X = sp.csr_array(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]))
    with pytest.raises(ValueError, match="3 tokens"):
        implicit_moments(X, "multinomial")
    with pytest.raises(ValueError, match="family"):
        implicit_moments(X, "gaussian")  # type: ignore[arg-type]


def test_explicit_moments_refuse_large_d() -> None:
    X = sp.csr_array((1, 201))
    with pytest.raises(ValueError, match="asvtd"):
        explicit_moments(X)


# ------------------------------------------------------------------------------- rank errors


def test_non_positive_eigenvalue_error_names_k() -> None:
    rng = np.random.default_rng(4)
    _, _, M1, M2, M3 = _population(rng, 10, 3)
    with pytest.raises(NonPositiveEigenvalueError, match="k=5") as info:
        svtd(M1, M2, M3, 5)
    assert info.value.k == 5
    # data with only 3 distinct row patterns: raw M2 has rank 3
    patterns = (rng.random((3, 12)) < 0.5).astype(float)
    X = sp.csr_array(patterns[rng.integers(0, 3, size=200)])
    with pytest.raises(NonPositiveEigenvalueError, match="k=4"):
        asvtd(X, 4)
    assert asvtd(X, 3).centers.shape == (12, 3)


# ------------------------------------------------------------------------------- SIDIWO rotation


def _grid_minimum(h: np.ndarray, f: np.ndarray, step: float = 1e-5) -> float:
    grid = np.arange(-1.0, 1.0, step)
    return float(sidiwo_objective(grid, h, f).min())


def _rotated_offdiag(rot_matrix: np.ndarray, H: np.ndarray) -> float:
    R = rot_matrix.T @ H @ rot_matrix
    return float((R[:, 0, 1] ** 2).sum())


def test_sidiwo_rotation_matches_the_papers_grid_search() -> None:
    rng = np.random.default_rng(2024)
    for trial in range(40):
        m = int(rng.integers(1, 30))
        A = rng.normal(size=(m, 2, 2)) * rng.exponential(size=(m, 1, 1))
        if trial % 4 == 0:  # nearly jointly diagonalisable slices
            Q, _ = np.linalg.qr(rng.normal(size=(2, 2)))
            D = np.zeros((m, 2, 2))
            D[:, [0, 1], [0, 1]] = rng.normal(size=(m, 2))
            A = Q @ D @ Q.T + 1e-3 * A
        H = (A + A.transpose(0, 2, 1)) / 2
        h, f = H[:, 0, 1], H[:, 0, 0] - H[:, 1, 1]
        rot = sidiwo_rotation(h, f)
        grid_min = _grid_minimum(h, f)
        # Lipschitz bound of the grid: F(θ) = uᵀGu, |dF/dθ| ≤ 4 λ_max(G); a = sin θ with
        # |θ*| ≤ π/4, so the nearest grid point is within 5e-6 / cos(π/4 + 1e-5) in θ.
        lam_max = rot.objective + rot.gap
        bound = 4.0 * lam_max * 5e-6 / np.cos(np.pi / 4 + 1e-5)
        assert rot.objective <= grid_min + 1e-9
        assert rot.objective >= grid_min - bound - 1e-12
        # the paper's quartic at a* = sin θ* and the explicit rotation agree
        a_star = np.sin(rot.theta)
        assert -1.0 <= a_star < 1.0
        assert float(sidiwo_objective(a_star, h, f)) == pytest.approx(rot.objective, abs=1e-10)
        assert _rotated_offdiag(rot.matrix, H) == pytest.approx(rot.objective, abs=1e-10)
        other = rot.swapped()
        assert _rotated_offdiag(other.matrix, H) == pytest.approx(rot.objective, abs=1e-10)
        assert other.objective == rot.objective
        assert abs(abs(other.theta - rot.theta) - np.pi / 2) < 1e-12
        assert other.swapped().theta == pytest.approx(rot.theta, abs=1e-12)


# ------------------------------------------------------------------------------- Jacobi


def _off(H: np.ndarray, rot: np.ndarray) -> float:
    R = rot.T @ H @ rot
    mask = ~np.eye(H.shape[1], dtype=bool)
    return float((R[:, mask] ** 2).sum())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_jacobi_recovers_a_joint_diagonaliser(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k, m = 4, 15
    Q, _ = np.linalg.qr(rng.normal(size=(k, k)))
    D = np.zeros((m, k, k))
    D[:, np.arange(k), np.arange(k)] = rng.normal(size=(m, k))
    H = Q @ D @ Q.T
    rot = jacobi_joint_diagonalize(H)
    np.testing.assert_allclose(rot.T @ rot, np.eye(k), atol=1e-12)
    P = np.abs(rot.T @ Q)  # a permutation matrix if O = Q up to column order and signs
    np.testing.assert_allclose(np.sort(P, axis=1)[:, -1], 1.0, atol=1e-9)
    np.testing.assert_allclose(np.sort(P, axis=1)[:, :-1], 0.0, atol=1e-9)
    assert _off(H, rot) < 1e-24 * (H**2).sum()


def test_jacobi_decreases_the_criterion_on_noisy_slices() -> None:
    rng = np.random.default_rng(8)
    k, m = 5, 20
    A = rng.normal(size=(m, k, k))
    H = (A + A.transpose(0, 2, 1)) / 2
    rot = jacobi_joint_diagonalize(H)
    assert _off(H, rot) < _off(H, np.eye(k))
    # a local minimum: no single Givens rotation improves it
    for p, q in itertools.combinations(range(k), 2):
        R = rot.T @ H @ rot
        pair = sidiwo_rotation(R[:, p, q], R[:, p, p] - R[:, q, q])
        assert pair.objective >= float((R[:, p, q] ** 2).sum()) - 1e-9
    # a warm start at the solution stays there
    np.testing.assert_allclose(jacobi_joint_diagonalize(H, init=rot), rot, atol=1e-9)
    with pytest.raises(ValueError):
        jacobi_joint_diagonalize(H[:, :, :3])
    with pytest.raises(ValueError):
        jacobi_joint_diagonalize(H, init=np.eye(3))


def test_jacobi_leaves_already_diagonal_degenerate_slices_alone() -> None:
    H = np.zeros((3, 3, 3))
    H[:, [0, 1, 2], [0, 1, 2]] = 1.0  # all diagonals equal: nothing to gain anywhere
    np.testing.assert_array_equal(jacobi_joint_diagonalize(H), np.eye(3))


def test_top_eigenpairs_of_an_operator_from_a_given_start_vector() -> None:
    """Lanczos on a linear operator from the caller's ``v0`` (the k-means start's seeded
    vector) finds the dense solver's top pairs; the same ``v0`` gives the same bytes, and
    another start other bytes (the start is the caller's, not the seeded default)."""
    rng = np.random.default_rng(3)
    B = rng.standard_normal((300, 40))
    G = B @ B.T  # rank 40, PSD: a Gram matrix like the embedding's
    op = spla.aslinearoperator(G)
    v0 = rng.standard_normal(300)
    vals, vecs = top_eigenpairs(op, 5, v0=v0, tol=1e-10)
    dense_vals, dense_vecs = np.linalg.eigh(G)
    np.testing.assert_allclose(vals, dense_vals[::-1][:5], rtol=1e-8)
    np.testing.assert_allclose(np.abs(vecs.T @ dense_vecs[:, ::-1][:, :5]), np.eye(5),
                               atol=1e-6)
    again_vals, again_vecs = top_eigenpairs(op, 5, v0=v0.copy(), tol=1e-10)
    assert again_vals.tobytes() == vals.tobytes() and again_vecs.tobytes() == vecs.tobytes()
    loose = top_eigenpairs(op, 5, v0=v0, tol=1e-6)[1]
    other = top_eigenpairs(op, 5, v0=rng.standard_normal(300), tol=1e-6)[1]
    assert loose.tobytes() != other.tobytes()
