"""MomentAccumulator: exact sums, merge, decay, tracked-basis third-order slices (design §3)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streammom.decompose import top_eigenpairs
from streammom.estimators import moments_from_data
from streammom.moments import MomentAccumulator
from streammom.packed import (
    SymmetricMatrix,
    add_packed_gram,
    pack_symmetric,
    packed_outer,
    packed_size,
    rotate_packed_third,
    unpack_symmetric,
)
from streammom.split import compute_split


def _random_binary(n: int, d: int, p: float, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    X = (rng.random((n, d)) < p).astype(float)
    X[0] = 0.0  # an empty row must be harmless
    return sp.csr_array(X)


def _random_counts(n: int, d: int, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    X = rng.poisson(0.6, size=(n, d)).astype(float)
    return sp.csr_array(X)


def _orthonormal(d: int, m: int, seed: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((d, m)))[0]


def _dense_raw_m3(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.einsum("n,ni,nj,nk->ijk", w, X, X, X) / w.sum()


def _dense_single_topic_m3(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_i w_i F(x_i) / T3 with the per-document tensor F of thesis Thm 3.2.1 (digest §4.2)."""
    d = X.shape[1]
    eye = np.eye(d)
    M = np.zeros((d, d, d))
    for x, wi in zip(X, w, strict=True):
        F = np.einsum("i,j,k->ijk", x, x, x)
        F -= np.einsum("h,hi,hj,k->ijk", x, eye, eye, x)
        F -= np.einsum("h,hi,j,hk->ijk", x, eye, x, eye)
        F -= np.einsum("h,i,hj,hk->ijk", x, x, eye, eye)
        F += 2 * np.einsum("h,hi,hj,hk->ijk", x, eye, eye, eye)
        M += wi * F
    t = X.sum(axis=1)
    T3 = float(w @ (t * np.maximum(t - 1, 0) * np.maximum(t - 2, 0)))
    return M / T3


def _whitened(M3: np.ndarray, E: np.ndarray) -> np.ndarray:
    H = np.einsum("ai,bj,ijr->rab", E, E, M3)
    return np.column_stack((H[:, 0, 0], H[:, 0, 1], H[:, 1, 1]))


# ---------------------------------------------------------------------- packed helpers
def test_pack_unpack_roundtrip() -> None:
    A = np.random.default_rng(0).standard_normal((5, 5))
    A = A + A.T
    p = pack_symmetric(A)
    assert p.shape == (packed_size(5),)
    np.testing.assert_array_equal(unpack_symmetric(p, 5), A)
    with pytest.raises(ValueError, match="packed"):
        unpack_symmetric(p[:-1], 5)


@pytest.mark.parametrize("binary", [True, False])
def test_packed_gram_equals_dense(binary: bool) -> None:
    X = _random_binary(60, 9, 0.4, 1) if binary else _random_counts(60, 9, 1)
    w = np.random.default_rng(2).uniform(0.1, 2.0, size=60)
    C = np.zeros(packed_size(9))
    add_packed_gram(C, X, w)
    dense = X.toarray()
    np.testing.assert_allclose(unpack_symmetric(C, 9), dense.T @ (w[:, None] * dense),
                               rtol=1e-12, atol=1e-12)


def test_packed_outer_matches_triu() -> None:
    Z = np.random.default_rng(3).standard_normal((4, 3))
    a, b = np.triu_indices(3)
    expected = np.array([np.outer(z, z)[a, b] for z in Z])
    np.testing.assert_allclose(packed_outer(Z), expected)
    w = np.array([1.0, 2.0, 0.5, 0.0])
    np.testing.assert_allclose(packed_outer(Z, w), expected * w[:, None])


def test_symmetric_matrix_products_match_the_dense_matrix() -> None:
    A = np.random.default_rng(4).standard_normal((70, 70))
    A = A + A.T
    S = SymmetricMatrix(pack_symmetric(A), 70, buffer=np.full((70, 70), np.nan))
    B = np.random.default_rng(5).standard_normal((70, 4))
    np.testing.assert_allclose(S.matmul(B), A @ B, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(S.matmul(B[:, 0]), A @ B[:, 0], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(S.diagonal(), np.diag(A))
    # float32 (the refit's eigen-solve), into a reused buffer of garbage: both triangles written.
    S32 = SymmetricMatrix(pack_symmetric(A), 70, buffer=np.full((70, 70), np.nan, np.float32),
                          dtype=np.float32)
    np.testing.assert_allclose(S32.matmul(B), A @ B, rtol=1e-4, atol=1e-4)
    assert S32.matmul(B).dtype == np.float64


# ---------------------------------------------------------------------- sums
@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_update_sums_are_exact(family: str) -> None:
    X = _random_binary(50, 7, 0.4, 4) if family == "bernoulli" else _random_counts(50, 7, 4)
    w = np.random.default_rng(5).uniform(0.5, 1.5, size=50)
    P = _orthonormal(7, 3, 6)
    acc = MomentAccumulator(7, family=family, basis=P)
    acc.update(X[:20], w[:20])
    acc.update(X[20:], w[20:])
    D = X.toarray()
    assert acc.weight == pytest.approx(w.sum(), rel=1e-14)
    np.testing.assert_allclose(acc.s, D.T @ w, rtol=1e-13)
    np.testing.assert_allclose(acc.second_matrix(), D.T @ (w[:, None] * D), rtol=1e-13)
    Z = D @ P
    a, b = np.triu_indices(3)
    T = np.einsum("n,nr,nk->rk", w, D, Z[:, a] * Z[:, b])
    np.testing.assert_allclose(acc.T, T, rtol=1e-12, atol=1e-12)
    if family == "multinomial":
        t = D.sum(axis=1)
        assert acc.t1 == pytest.approx(w @ t)
        assert acc.t2 == pytest.approx(w @ (t * np.maximum(t - 1, 0)))
        assert acc.t3 == pytest.approx(w @ (t * np.maximum(t - 1, 0) * np.maximum(t - 2, 0)))


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_merge_equals_accumulating_the_union(family: str) -> None:
    X = _random_binary(80, 8, 0.3, 7) if family == "bernoulli" else _random_counts(80, 8, 7)
    w = np.random.default_rng(8).uniform(0.2, 3.0, size=80)
    P = _orthonormal(8, 4, 9)
    a, b, u = (MomentAccumulator(8, family=family, basis=P) for _ in range(3))
    a.update(X[:33], w[:33])
    b.update(X[33:], w[33:])
    u.update(X, w)
    a.merge(b)
    for name in ("weight", "t1", "t2", "t3"):
        assert getattr(a, name) == pytest.approx(getattr(u, name), rel=1e-13)
    for name in ("s", "C", "T"):
        np.testing.assert_allclose(getattr(a, name), getattr(u, name), rtol=1e-12, atol=1e-12)


def test_merge_rejects_a_different_basis() -> None:
    a = MomentAccumulator(5, basis=_orthonormal(5, 2, 0))
    b = MomentAccumulator(5, basis=_orthonormal(5, 2, 1))
    with pytest.raises(ValueError, match="basis"):
        a.merge(b)
    with pytest.raises(ValueError, match="same d"):
        a.merge(MomentAccumulator(6))


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_decay_equals_sums_of_decayed_weights(family: str) -> None:
    X = _random_binary(40, 6, 0.5, 10) if family == "bernoulli" else _random_counts(40, 6, 10)
    P = _orthonormal(6, 3, 11)
    # Events 0..39 arrive one per step; after the last one, event i has age 39 − i.
    half_life = 7.0
    acc = MomentAccumulator(6, family=family, basis=P)
    for i in range(40):
        acc.decay(2.0 ** (-1.0 / half_life) if i else 1.0)
        acc.update(X[i : i + 1])
    ref = MomentAccumulator(6, family=family, basis=P)
    ref.update(X, 2.0 ** (-(39 - np.arange(40)) / half_life))
    for name in ("weight", "t1", "t2", "t3"):
        assert getattr(acc, name) == pytest.approx(getattr(ref, name), rel=1e-12)
    for name in ("s", "C", "T"):
        np.testing.assert_allclose(getattr(acc, name), getattr(ref, name), rtol=1e-11,
                                   atol=1e-13)
    with pytest.raises(ValueError, match="decay factor"):
        acc.decay(-1.0)


# ---------------------------------------------------------------------- third order
@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_tracked_basis_gives_exact_whitened_slices(family: str) -> None:
    d, m = 7, 4
    X = _random_binary(70, d, 0.4, 12) if family == "bernoulli" else _random_counts(70, d, 12)
    w = np.random.default_rng(13).uniform(0.5, 2.0, size=70)
    P = _orthonormal(d, m, 14)
    acc = MomentAccumulator(d, family=family, basis=P)
    acc.update(X, w)
    D = X.toarray()
    M3 = _dense_raw_m3(D, w) if family == "bernoulli" else _dense_single_topic_m3(D, w)
    E_in = np.random.default_rng(15).standard_normal((2, m)) @ P.T  # rows inside span(P)
    np.testing.assert_allclose(acc.third_slices(E_in), _whitened(M3, E_in), rtol=1e-10,
                               atol=1e-12)
    assert acc.basis_residual(E_in) < 1e-12
    E_out = np.random.default_rng(16).standard_normal((2, d))
    assert acc.basis_residual(E_out) > 0.1
    assert not np.allclose(acc.third_slices(E_out), _whitened(M3, E_out), atol=1e-6)


def test_node_moments_split_matches_the_batch_split() -> None:
    """With P = top-m eigenvectors of M2, T-based slices reproduce the data-based split."""
    rng = np.random.default_rng(17)
    d = 30
    centres = np.where(rng.random((2, d)) < 0.5, 0.7, 0.05)
    z = rng.integers(0, 2, size=400)
    X = sp.csr_array((rng.random((400, d)) < centres[z]).astype(float))
    M2 = (X.T @ X).toarray() / 400
    _, P = top_eigenpairs(M2, 6)
    acc = MomentAccumulator(d, basis=P)
    acc.update(X)
    ours = compute_split(acc.node_moments(), family="bernoulli")
    batch = compute_split(moments_from_data(X), family="bernoulli")
    np.testing.assert_allclose(np.abs(ours.discriminators), np.abs(batch.discriminators),
                               rtol=1e-8, atol=1e-10)


def test_rotation_into_a_sub_basis_is_exact() -> None:
    d, m = 9, 5
    X = _random_binary(60, d, 0.35, 18)
    P = _orthonormal(d, m, 19)
    Q = np.linalg.qr(np.random.default_rng(20).standard_normal((m, 3)))[0]
    P_sub = P @ Q  # span(P_sub) ⊂ span(P)
    acc = MomentAccumulator(d, basis=P)
    acc.update(X)
    acc.set_basis(P_sub)  # no reservoir: the rotation alone must be exact
    direct = MomentAccumulator(d, basis=P_sub)
    direct.update(X)
    np.testing.assert_allclose(acc.T, direct.T, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(rotate_packed_third(acc.T, np.eye(3)), acc.T)


def test_rebase_with_a_complete_reservoir_is_exact() -> None:
    """Rotate the in-span part and repair the rest from the rows: exact if the rows are all."""
    d = 8
    X = _random_binary(50, d, 0.4, 21)
    P_old, P_new = _orthonormal(d, 4, 22), _orthonormal(d, 4, 23)
    acc = MomentAccumulator(d, basis=P_old)
    acc.update(X)
    acc.set_basis(P_new, rows=X, row_weight=1.0)
    direct = MomentAccumulator(d, basis=P_new)
    direct.update(X)
    np.testing.assert_allclose(acc.T, direct.T, rtol=1e-10, atol=1e-11)


def test_first_basis_fills_t_from_rows() -> None:
    X = _random_binary(30, 6, 0.5, 24)
    acc = MomentAccumulator(6)
    acc.update(X)
    assert acc.T is None and acc.basis_residual(np.ones((2, 6))) == 1.0
    P = _orthonormal(6, 3, 25)
    acc.set_basis(P, rows=X, row_weight=1.0)
    direct = MomentAccumulator(6, basis=P)
    direct.update(X)
    np.testing.assert_allclose(acc.T, direct.T, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- archive, validation
def test_archive_roundtrip_and_copy() -> None:
    X = _random_counts(20, 5, 26)
    acc = MomentAccumulator(5, family="multinomial", basis=_orthonormal(5, 2, 27))
    acc.update(X)
    meta, arrays = acc.to_archive()
    back = MomentAccumulator.from_archive(meta, arrays)
    for name in ("weight", "t1", "t2", "t3"):
        assert getattr(back, name) == getattr(acc, name)
    for name in ("s", "C", "T", "basis"):
        np.testing.assert_array_equal(getattr(back, name), getattr(acc, name))
    cp = acc.copy()
    cp.update(X)
    assert cp.weight == 2 * acc.weight
    np.testing.assert_array_equal(back.s, acc.s)


def test_validation_errors() -> None:
    with pytest.raises(ValueError, match="family"):
        MomentAccumulator(3, family="poisson")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="orthonormal"):
        MomentAccumulator(3, basis=np.ones((3, 2)))
    acc = MomentAccumulator(3)
    with pytest.raises(ValueError, match="features"):
        acc.update(np.ones((2, 4)))
    with pytest.raises(ValueError, match="weights"):
        acc.update(np.ones((2, 3)), np.ones(3))
    with pytest.raises(ValueError, match="no tracked basis"):
        acc.third_slices(np.ones((2, 3)))
    with pytest.raises(ValueError, match="zero weight"):
        acc.second_moment()
    internal = MomentAccumulator(3, second_order=False)
    with pytest.raises(ValueError, match="keeps no C"):
        internal.second_matrix()


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_add_rows_over_ranges_equals_definitions(family: str) -> None:
    """The engine's hot path adds row ranges start:stop of one sorted batch to each node: the
    sums over consecutive ranges equal the definitions W = Σ w, s = Σ w x, C = Σ w x xᵀ,
    T_r = Σ w x_r (Pᵀx)(Pᵀx)ᵀ, T1–T3, and a node without a basis or C keeps none."""
    d, n = 30, 200
    X = _random_binary(n, d, 0.2, 5) if family == "bernoulli" else _random_counts(n, d, 5)
    w = np.random.default_rng(6).uniform(0.5, 2.0, n)
    P = _orthonormal(d, 6, 2)
    acc = MomentAccumulator(d, family=family, basis=P)
    bare = MomentAccumulator(d, family=family, second_order=False)
    lengths = np.asarray(X.sum(axis=1)).ravel()
    for a, b in [(0, 0), (0, 37), (37, 120), (120, n)]:
        acc.add_rows(X, w, a, b, lengths=lengths)
        bare.add_rows(X, w, a, b)  # lengths computed from the rows
    Xd = X.toarray()
    Z = Xd @ P
    tri_a, tri_b = np.triu_indices(6)
    expect_T = np.einsum("n,nr,na,nb->rab", w, Xd, Z, Z)[:, tri_a, tri_b]
    t = Xd.sum(axis=1)
    for node in (acc, bare):
        assert node.weight == pytest.approx(w.sum(), rel=1e-12)
        np.testing.assert_allclose(node.s, w @ Xd, rtol=1e-12)
        if family == "multinomial":
            expect = (w @ t, w @ (t * (t - 1)), w @ (t * (t - 1) * (t - 2)))
            assert (node.t1, node.t2, node.t3) == pytest.approx(expect, rel=1e-12)
    np.testing.assert_allclose(acc.T, expect_T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(acc.second_matrix(), (Xd * w[:, None]).T @ Xd, rtol=1e-12)
    assert bare.T is None and bare.C is None
    # second=False / third=False leave C and T alone.
    before_C, before_T = acc.C.copy(), acc.T.copy()
    acc.add_rows(X, w, 0, n, second=False, third=False)
    np.testing.assert_array_equal(acc.C, before_C)
    np.testing.assert_array_equal(acc.T, before_T)
    np.testing.assert_allclose(acc.s, 2 * (w @ Xd), rtol=1e-12)


def test_update_rejects_out_of_range_indices() -> None:
    """scipy accepts a CSR whose column indices exceed its shape; the compiled kernels must
    never see one (they do not bounds-check), so the boundary rejects it."""
    bad = sp.csr_array((np.ones(2), np.array([1, 7]), np.array([0, 1, 2])), shape=(2, 5))
    acc = MomentAccumulator(5)
    with pytest.raises(ValueError, match="column indices"):
        acc.update(bad)
    neg = sp.csr_array((np.ones(1), np.array([-1]), np.array([0, 1])), shape=(1, 5))
    with pytest.raises(ValueError, match="column indices"):
        acc.update(neg)
    assert acc.weight == 0.0 and not acc.s.any()
