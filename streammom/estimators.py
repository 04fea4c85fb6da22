"""The moment estimators, in one place: families, normalisers, corrections and M1, M2, M3.

Every layer computes its moments here — the streaming accumulator from its running sums
(:mod:`streammom.moments`), the 2-way split from rows (:func:`moments_from_data`) and the k-way
decomposition (:class:`ImplicitMoments`, :func:`explicit_moments`). Two families (design §2,
thesis digest §4.2):

* ``"bernoulli"`` — raw (data-centric) moments of binary data, thesis Thm 4.3.1 / Alg. 2:
  M1 = s / W, M2 = C / W, M3 = Σ w x⊗x⊗x / W with W = Σ w, s = Σ w x, C = Σ w x xᵀ.
* ``"multinomial"`` — the unbiased single-topic estimators of thesis Thm 3.2.1 for counts:
  M1 = s / T1, M2 = (C − diag s) / T2, M3 = Σ w F(x) / T3 with T1 = Σ w t, T2 = Σ w t(t−1),
  T3 = Σ w t(t−1)(t−2) (t = the row's token count; t−1 and t−2 clamped at 0, digest pitfall
  12) and F(x) = x⊗x⊗x minus the repeated-index terms (:func:`single_topic_third_corrections`).

Nothing here forms a d×d×d tensor except :func:`explicit_moments` (small d only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streammom import _kernels
from streammom._validation import as_csr, as_weights
from streammom.family import FAMILIES, FAMILY_OPTIONS, Family, FamilyOption, check_family

__all__ = [
    "DENSE_EIGH_MAX_DIM",
    "FAMILIES",
    "FAMILY_OPTIONS",
    "Family",
    "FamilyOption",
    "ImplicitMoments",
    "NodeMoments",
    "check_family",
    "check_family_data",
    "explicit_moments",
    "implicit_moments",
    "moments_from_data",
    "normalisers",
    "resolve_family",
    "single_topic_normalisers",
    "single_topic_third_corrections",
]


#: M2 is formed dense (LAPACK ``eigh``) up to this d, a matrix-free operator above.
DENSE_EIGH_MAX_DIM = 400
_MAX_EXPLICIT_DIM = 200  # d³ doubles = 64 MB at d = 200
_CHUNK_FLOATS = 1 << 22  # rows per chunk × width of the per-row features (≈ 32 MB of float64)

#: Given E† (2, d), return the packed whitened third-order slices, shape (d, 3).
ThirdOrder = Callable[[np.ndarray], np.ndarray]


# ---------------------------------------------------------------------------------- families
def resolve_family(family: object, X: sp.csr_array) -> Family:
    """The family an estimator fits: ``family`` itself, or for ``"auto"`` the one the data is:

    * ``"bernoulli"`` when every entry of ``X`` is 0 or 1 (code sets, binary features);
    * ``"multinomial"`` otherwise (token counts).

    Measured on the bench sets (BENCHMARKS.md, "choosing the family"): on binary data the
    Bernoulli model is as good or better (DNA 0.63 against 0.42 ARI in the stream), and
    counts need the multinomial model (a Bernoulli model rejects them).

    >>> resolve_family("auto", sp.csr_array(np.array([[1.0, 0.0], [0.0, 1.0]])))
    'bernoulli'
    >>> resolve_family("auto", sp.csr_array(np.array([[2.0, 0.0], [0.0, 1.0]])))
    'multinomial'
    """
    if family != "auto":
        return check_family(family)
    return "bernoulli" if _is_binary(X) else "multinomial"


def _is_binary(X: sp.csr_array) -> bool:
    """Every stored entry of ``X`` is 0 or 1 (what a Bernoulli model describes)."""
    return not X.data.size or bool(np.isin(X.data, (0.0, 1.0)).all())


def check_family_data(X: sp.csr_array, family: object) -> None:
    """Bernoulli models describe binary data: reject entries other than 0 and 1."""
    check_family(family)
    if family == "bernoulli" and not _is_binary(X):
        raise ValueError("family='bernoulli' needs binary X (entries 0 or 1); counts need "
                         "family='multinomial'")


# ------------------------------------------------------------------------------- normalisers
def single_topic_normalisers(w: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """(T1, T2, T3) = (Σ w t, Σ w t(t−1), Σ w t(t−1)(t−2)), t−1 and t−2 clamped at 0.

    The normalisers of the single-topic estimators (thesis Thm 3.2.1, digest §4.2): a document
    of fewer than 2 (3) tokens adds nothing to M2 (M3). Additive over batches.

    >>> single_topic_normalisers(np.ones(2), np.array([1.0, 3.0]))
    (4.0, 6.0, 6.0)
    """
    t1 = np.maximum(t - 1.0, 0.0)
    t2 = np.maximum(t - 2.0, 0.0)
    return float(w @ t), float(w @ (t * t1)), float(w @ (t * t1 * t2))


def normalisers(family: Family, w: np.ndarray, X: sp.csr_array) -> tuple[float, float, float]:
    """The divisors (n1, n2, n3) of M1, M2, M3: (W, W, W) raw, (T1, T2, T3) single topic."""
    if family == "bernoulli":
        total = float(w.sum())
        return total, total, total
    return single_topic_normalisers(w, np.asarray(X.sum(axis=1), dtype=float).ravel())


def require_positive(family: Family, normaliser: float, order: int) -> None:
    """Raise a clear ``ValueError`` when the divisor of the order-``order`` moment is not > 0."""
    if normaliser > 0:
        return
    if family == "bernoulli":
        raise ValueError("a node with zero weight has no moments")
    raise ValueError(f"single-topic moments need documents with at least {order} tokens")


# ------------------------------------------------------------------------------- corrections
def single_topic_third_corrections(
    c_times: Callable[[np.ndarray], np.ndarray], s: np.ndarray, Epinv: np.ndarray
) -> np.ndarray:
    """The repeated-index corrections of the single-topic M3 estimator, whitened and packed.

    Returns (d, 3): −E† diag(C[:, r]) E†ᵀ − w_r (E† C[:, r])ᵀ − (E† C[:, r]) w_rᵀ + 2 s_r w_r w_rᵀ
    for every r (thesis digest §4.5), where ``c_times(B)`` computes C @ B for a (d, m) array B
    and w_r is column r of E† (2, d). Cost: two products with C; never forms M3. The k-way
    forms of the same terms are in :meth:`ImplicitMoments.whitened_slices` (all k×k slices),
    :meth:`ImplicitMoments.rows` (their diagonals after rotation) and
    :func:`explicit_moments` (the dense tensor).
    """
    W0, W1 = Epinv[0], Epinv[1]
    Q = np.column_stack((W0 * W0, W0 * W1, W1 * W1))
    CQ = c_times(Q)  # (d, 3): Σ_h C[r, h] Q[h]
    V = c_times(Epinv.T)  # (d, 2): row r = E† C[:, r]
    cross = np.column_stack((2 * W0 * V[:, 0], W0 * V[:, 1] + W1 * V[:, 0], 2 * W1 * V[:, 1]))
    return -CQ - cross + 2.0 * s[:, None] * Q


# ------------------------------------------------------------------------- 2-way node moments
@dataclass(frozen=True)
class NodeMoments:
    """What a 2-way split needs from a node, however the sums were accumulated.

    ``m2`` is the M2 estimate (dense or a linear operator), ``m1`` the M1 estimate and
    ``third(E†)`` returns the packed whitened slices (d, 3), already normalised.
    """

    m2: np.ndarray | spla.LinearOperator
    m1: np.ndarray
    third: ThirdOrder


def _packed_outer(Z: np.ndarray) -> np.ndarray:
    """Row-wise packed outer products [z0², z0·z1, z1²] of an (n, 2) array."""
    return np.column_stack((Z[:, 0] * Z[:, 0], Z[:, 0] * Z[:, 1], Z[:, 1] * Z[:, 1]))


def moments_from_data(
    X: sp.csr_array, weights: np.ndarray | None = None, *, family: Family = "bernoulli"
) -> NodeMoments:
    """Implicit node moments straight from rows (ASVTD-style: M2 and M3 are never formed).

    M2 is a linear operator v ↦ Xᵀ diag(w) X v / W (raw) or (Xᵀ diag(w) X v − s∘v) / T2
    (single topic, thesis Thm 3.2.1); the third-order callback costs O(nnz · 3).
    """
    check_family(family)
    n, d = X.shape
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    Xt = X.T.tocsr()
    s = Xt @ w
    n1, n2, n3 = normalisers(family, w, X)
    require_positive(family, n3, 3)
    m1 = s / n1

    def c_times(B: np.ndarray) -> np.ndarray:
        return Xt @ (w[:, None] * (X @ B))

    if family == "bernoulli":

        def matvec(v: np.ndarray) -> np.ndarray:
            return c_times(np.asarray(v).reshape(d, -1)).reshape(np.shape(v)) / n2

        def third(Epinv: np.ndarray) -> np.ndarray:
            return Xt @ (w[:, None] * _packed_outer(X @ Epinv.T)) / n3

    else:

        def matvec(v: np.ndarray) -> np.ndarray:
            v2 = np.asarray(v).reshape(d, -1)
            return ((c_times(v2) - s[:, None] * v2) / n2).reshape(np.shape(v))

        def third(Epinv: np.ndarray) -> np.ndarray:
            raw = Xt @ (w[:, None] * _packed_outer(X @ Epinv.T))
            return (raw + single_topic_third_corrections(c_times, s, Epinv)) / n3

    op = spla.LinearOperator((d, d), matvec=matvec, matmat=matvec, dtype=np.float64)
    return NodeMoments(m2=op, m1=m1, third=third)


# ------------------------------------------------------------------- k-way moments of a data set
def _rowwise_outer(A: np.ndarray) -> np.ndarray:
    """Row-wise outer products: (n, k) → (n, k·k) with row i = vec(a_i a_iᵀ)."""
    n, k = A.shape
    return (A[:, :, None] * A[:, None, :]).reshape(n, k * k)


def _chunks(n: int, width: int) -> Iterator[slice]:
    step = max(1, _CHUNK_FLOATS // max(width, 1))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def _xt_weighted(
    X: sp.csr_array, w: np.ndarray, rows: Callable[[slice], np.ndarray], width: int
) -> np.ndarray:
    """Xᵀ diag(w) F = Σ_i w_i x_i ⊗ F_i, with F built block by block by ``rows`` (bounded memory).

    Cost O(nnz(X) · width); no Python loop over samples or features.
    """
    out = np.zeros((X.shape[1], width))
    for sl in _chunks(X.shape[0], width):
        out += X[sl].T @ (w[sl, None] * rows(sl))
    return out


@dataclass(frozen=True)
class ImplicitMoments:
    """M1, M2 and the whitened M3 slices of a data set, without forming M3 (nor M2 for large d).

    ``family="bernoulli"``: raw (data-centric) moments, thesis Thm 4.3.1 / Alg. 2 —
    M1 = Σ w_i x_i / W, M2 = Σ w_i x_i x_iᵀ / W, M3 = Σ w_i x_i⊗x_i⊗x_i / W.
    ``family="multinomial"``: the unbiased single-topic estimators of thesis Thm 3.2.1 (digest
    §4.2) with T1 = Σ w_i t_i, T2 = Σ w_i t_i(t_i−1), T3 = Σ w_i t_i(t_i−1)(t_i−2):
    M1 = Xᵀw / T1, M2 = (Xᵀ diag(w) X − diag(Xᵀw)) / T2, M3 = Σ w_i F(x_i) / T3.
    """

    X: sp.csr_array
    sample_weight: np.ndarray
    family: str
    col_sums: np.ndarray  # s = Xᵀ w
    n1: float  # normaliser of M1 (W or T1)
    n2: float  # normaliser of M2 (W or T2)
    n3: float  # normaliser of M3 (W or T3)

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def m1(self) -> np.ndarray:
        return self.col_sums / self.n1

    def m2_dense(self) -> np.ndarray:
        """M2 as a dense d × d array (small d only)."""
        X, w = self.X, self.sample_weight
        C = (X.T @ (X.multiply(w[:, None]).tocsr())).toarray()
        if self.family == "multinomial":
            C[np.diag_indices_from(C)] -= self.col_sums
        return C / self.n2

    def m2_operator(self) -> spla.LinearOperator:
        """M2 as a matrix-free operator: v ↦ (Xᵀ(w ∘ Xv) [− s ∘ v]) / n2, O(nnz) per product."""
        X, w, s, multinomial = self.X, self.sample_weight, self.col_sums, self.family != "bernoulli"

        def matvec(v: np.ndarray) -> np.ndarray:
            v = np.asarray(v, dtype=float).reshape(X.shape[1], -1)
            out = X.T @ (w[:, None] * (X @ v))
            if multinomial:
                out = out - s[:, None] * v
            return out / self.n2

        d = X.shape[1]
        return spla.LinearOperator((d, d), matvec=matvec, matmat=matvec, dtype=float)

    def m2(self) -> np.ndarray | spla.LinearOperator:
        """Dense M2 when d is small enough for LAPACK ``eigh``, else the matrix-free operator."""
        if self.n_features <= DENSE_EIGH_MAX_DIM:
            return self.m2_dense()
        return self.m2_operator()

    def whitened_slices(self, pinv: np.ndarray) -> np.ndarray:
        """All H_r = W M3_r Wᵀ at once as a (d, k, k) array, W = E† (k × d). O(nnz · k²).

        Raw moments (thesis Alg. 2, line 7): H_r = Zᵀ diag(w ∘ X[:, r]) Z / W with Z = X Wᵀ, i.e.
        Xᵀ diag(w) times the (n, k²) row-wise outer products of Z.
        Single topic (digest §4.5, with C = Xᵀ diag(w) X never formed, w_r = W[:, r]):
        H_r = [Zᵀ diag(w ∘ X[:, r]) Z − W diag(C[:, r]) Wᵀ − w_r (W C[:, r])ᵀ − (W C[:, r]) w_rᵀ
        + 2 s_r w_r w_rᵀ] / T3, where W diag(C[:, r]) Wᵀ = row r of C·vec(w_h w_hᵀ) and
        C·F = Xᵀ diag(w) (X F).
        The two data terms are summed in one compiled pass over the rows, upper triangles
        only (:func:`streammom._kernels.packed_slice_sums`: O(nnz · k(k+1)/2) each, no
        (n, k²) blocks); the rest is O(d · k²) dense.
        """
        X, w = self.X, self.sample_weight
        k = pinv.shape[0]
        Wt = np.ascontiguousarray(pinv.T)  # (d, k), row h = w_h
        Z = np.ascontiguousarray(X @ Wt)  # (n, k)
        single_topic = self.family == "multinomial"
        # Zᵀ diag(w ∘ X[:, r]) Z [− W diag(C[:, r]) Wᵀ] for every r, upper triangles, in one
        # compiled pass over the rows (O(nnz · k²/2), no (n, k²) blocks).
        upper = np.zeros((X.shape[1], k * (k + 1) // 2))
        _kernels.packed_slice_sums(X.indptr, X.indices, X.data, w, Z, Wt, single_topic,
                                     upper)
        rows, cols = np.triu_indices(k)
        A = np.empty((X.shape[1], k, k))
        A[:, rows, cols] = upper
        A[:, cols, rows] = upper
        del upper
        if single_topic:
            B = X.T @ (w[:, None] * Z)  # (d, k): row r = W C[:, r]
            term = Wt[:, :, None] * B[:, None, :]
            A -= term
            A -= term.transpose(0, 2, 1)
            np.multiply(Wt[:, :, None], Wt[:, None, :], out=term)
            term *= 2.0 * self.col_sums[:, None, None]
            A += term
        A /= self.n3
        return A

    def rows(self, pinv: np.ndarray, rotation: np.ndarray) -> np.ndarray:
        """All rows of M, M[r, j] = (Oᵀ H_r O)_jj, without forming the slices. O(nnz · k).

        With V = Oᵀ W and Y = Z O = X Vᵀ: raw moments give M = Xᵀ diag(w) (Y ∘ Y) / W; the
        single-topic estimator gives (digest §4.5, vectorised row extraction)
        M[r, j] = [(Xᵀ(Y∘Y))_{rj} − (C (V∘V)ᵀ)_{rj} − 2 V_{jr} (C Vᵀ)_{rj} + 2 s_r V_{jr}²] / T3.
        """
        X, w = self.X, self.sample_weight
        Vt = np.ascontiguousarray(pinv.T @ rotation)  # (d, k) = Vᵀ
        Y = X @ Vt  # (n, k)
        out = X.T @ (w[:, None] * Y * Y)
        if self.family == "multinomial":
            out -= X.T @ (w[:, None] * (X @ (Vt * Vt)))
            out -= 2.0 * Vt * (X.T @ (w[:, None] * Y))
            out += 2.0 * self.col_sums[:, None] * Vt * Vt
        return np.asarray(out) / self.n3


def implicit_moments(
    X: Any,
    family: Family = "bernoulli",
    sample_weight: Any = None,
) -> ImplicitMoments:
    """Validate the data and compute the normalisers of the family's moment estimators.

    Documents with t < 2 (t < 3) add nothing to M2 (M3): t(t−1), t(t−1)(t−2) are taken with
    t−1, t−2 clamped at 0 (digest §4.2, pitfall 12). Raises ``ValueError`` if a normaliser is 0.
    """
    check_family(family)
    Xc = as_csr(X)
    w = as_weights(sample_weight, Xc.shape[0])
    s = np.asarray(Xc.T @ w).ravel()
    n1, n2, n3 = normalisers(family, w, Xc)
    check_third_order(family, n1, n2, n3)
    return ImplicitMoments(Xc, w, family, s, n1, n2, n3)


def check_third_order(family: Family, n1: float, n2: float, n3: float) -> None:
    """A clear ``ValueError`` when the normalisers leave M1–M3 undefined (a k-way fit or a
    batch tree cannot start: no weight, or no document of ≥ 3 tokens)."""
    if min(n1, n2, n3) <= 0:
        need = "positive sample weights" if family == "bernoulli" else "documents of ≥ 3 tokens"
        raise ValueError(f"cannot estimate third-order moments: need {need}")


def explicit_moments(
    X: Any,
    family: Family = "bernoulli",
    sample_weight: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense (M1, M2, M3) for small d (≤ 200): the explicit-moments path of SVTD (thesis Alg. 1).

    Same estimators as :class:`ImplicitMoments`. The single-topic M3 subtracts the repeated-
    index terms of F(x) = x⊗x⊗x − Σ_h x_h (e_h⊗e_h⊗x + e_h⊗x⊗e_h + x⊗e_h⊗e_h)
    + 2 Σ_h x_h e_h⊗e_h⊗e_h (digest §4.2). Cost O(nnz · d²) time and O(d³) memory.
    """
    mom = implicit_moments(X, family, sample_weight)
    d = mom.n_features
    if d > _MAX_EXPLICIT_DIM:
        raise ValueError(
            f"explicit third-order moments need d ≤ {_MAX_EXPLICIT_DIM} (d³ memory), got "
            f"d={d}; use the implicit path (asvtd / method='asvtd')"
        )
    X, w = mom.X, mom.sample_weight
    M3 = _xt_weighted(X, w, lambda sl: _rowwise_outer(X[sl].toarray()), d * d).reshape(d, d, d)
    C = (X.T @ (X.multiply(w[:, None]).tocsr())).toarray()
    M2 = C.copy()
    if family == "multinomial":
        idx = np.arange(d)
        M3[idx, idx, :] -= C
        M3[idx, :, idx] -= C
        M3[:, idx, idx] -= C
        M3[idx, idx, idx] += 2.0 * mom.col_sums
        M2[idx, idx] -= mom.col_sums
    return mom.m1, M2 / mom.n2, M3 / mom.n3
