"""Mergeable, decayable moment accumulators with a tracked third-order basis (design §3).

One :class:`MomentAccumulator` holds the running sums of one tree node, with event weights w_i:

===========  ======================  =====================================================
sum          shape                   note
===========  ======================  =====================================================
W = Σ w      scalar                  M1 = s / W (Bernoulli) or s / T1 (single topic)
s = Σ w x    (d,)
C = Σ w xxᵀ  packed upper, d(d+1)/2  raw M2 = C / W; single topic (C − diag s) / T2
T            (d, m(m+1)/2)           T_r = Σ w x_r (Pᵀx)(Pᵀx)ᵀ packed, P: d×m orthonormal
T1, T2, T3   scalars                 Σ w t, Σ w t(t−1), Σ w t(t−1)(t−2) (thesis Thm 3.2.1)
===========  ======================  =====================================================

All sums are linear in the data, so :meth:`~MomentAccumulator.merge` (same basis) and
:meth:`~MomentAccumulator.decay` are exact. The whitened third-order slices for any whitening
E† whose rows lie in span(P) follow from T without ever forming the d³ tensor (design §3):
with B = E† P (2×m), H_r = B T_r Bᵀ / W (raw moments, D-SIDIWO / ASVTD), plus, for counts, the
repeated-index corrections of the single-topic estimator over T3 (thesis digest part 1 §4.5).

Packed layout: row-major upper triangle, the order of ``np.triu_indices`` — entry (i, j), i ≤ j,
sits at i(2d − i − 1)/2 + j.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
import scipy.sparse as sp

from streammom import _kernels
from streammom._validation import check_csr_structure
from streammom.estimators import (
    Family,
    NodeMoments,
    check_family,
    require_positive,
    single_topic_normalisers,
    single_topic_third_corrections,
)

__all__ = [
    "MomentAccumulator",
    "SymmetricMatrix",
    "add_packed_gram",
    "pack_symmetric",
    "packed_outer",
    "packed_size",
    "rotate_packed_third",
    "row_sums",
    "unpack_symmetric",
    "widen_packed",
]

def packed_size(d: int) -> int:
    """Number of entries of the packed upper triangle of a d×d symmetric matrix."""
    return d * (d + 1) // 2


@lru_cache(maxsize=8)
def _row_offsets(d: int) -> np.ndarray:
    i = np.arange(d, dtype=np.int64)
    out = (i * (2 * d - i - 1)) // 2
    out.setflags(write=False)
    return out


@lru_cache(maxsize=32)
def _triu(m: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.triu_indices(m)
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


def pack_symmetric(A: np.ndarray) -> np.ndarray:
    """The packed upper triangle of a symmetric (d, d) array.

    >>> pack_symmetric(np.array([[1.0, 2.0], [2.0, 3.0]])).tolist()
    [1.0, 2.0, 3.0]
    """
    A = np.asarray(A, dtype=np.float64)
    a, b = _triu(A.shape[0])
    return A[a, b]


#: Store C as its non-zero entries when at most this share of it is non-zero: co-occurrence of
#: codes is sparse (0.5 % of a 4,096-column C on a Zipf encounter stream), and a checkpoint
#: then writes and deflates kilobytes instead of d²/2 doubles per node.
_SPARSE_ARCHIVE_DENSITY = 0.25


def packed_archive(C: np.ndarray) -> dict[str, np.ndarray]:
    """The archive arrays of a packed C: ``C`` (dense), or ``C_at`` (int64 positions, ascending)
    + ``C_val`` (their values) when at most a quarter of it is non-zero. Exact either way.

    >>> sorted(packed_archive(np.array([0.0, 2.0, 0.0, 0.0, 0.0])).items())
    [('C_at', array([1])), ('C_val', array([2.]))]
    """
    at = np.flatnonzero(C)
    if at.size > _SPARSE_ARCHIVE_DENSITY * C.size:
        return {"C": C}
    return {"C_at": at.astype(np.int64), "C_val": C[at]}


def packed_from_archive(arrays: Mapping[str, np.ndarray], size: int) -> np.ndarray:
    """Inverse of :func:`packed_archive`; validates shapes and positions (archives are data
    from outside: positions must be distinct, ascending and inside ``size``)."""
    if "C" in arrays:
        C = np.array(arrays["C"], dtype=np.float64)
        if C.shape != (size,):
            raise ValueError("accumulator archive: C has the wrong shape")
        return C
    at, val = np.asarray(arrays["C_at"]), np.asarray(arrays["C_val"], dtype=np.float64)
    if (at.ndim != 1 or val.shape != at.shape or at.dtype.kind not in "iu"
            or (at.size and (at[0] < 0 or at[-1] >= size or np.any(np.diff(at) <= 0)))):
        raise ValueError("accumulator archive: sparse C is malformed")
    C = np.zeros(size)
    C[at] = val
    return C


def widen_packed(packed: np.ndarray, d: int, d_new: int) -> np.ndarray:
    """The packed upper triangle of the (d_new, d_new) matrix whose top-left d × d block is
    ``packed`` and whose new rows and columns are zero. O(d_new²) (one pass of row copies).

    >>> widen_packed(np.array([1.0, 2.0, 3.0]), 2, 3).tolist()
    [1.0, 2.0, 0.0, 3.0, 0.0, 0.0]
    """
    if d_new < d:
        raise ValueError(f"cannot narrow a packed matrix from {d} to {d_new}")
    out = np.zeros(packed_size(d_new), dtype=packed.dtype)
    old, new = _row_offsets(d), _row_offsets(d_new)  # entry (i, j ≥ i) is at offsets[i] + j
    for i in range(d):
        out[new[i] + i : new[i] + d] = packed[old[i] + i : old[i] + d]
    return out


def unpack_symmetric(packed: np.ndarray, d: int) -> np.ndarray:
    """The dense symmetric (d, d) matrix of a packed upper triangle.

    >>> unpack_symmetric(np.array([1.0, 2.0, 3.0]), 2).tolist()
    [[1.0, 2.0], [2.0, 3.0]]
    """
    if packed.shape != (packed_size(d),):
        raise ValueError(f"packed array has shape {packed.shape}, expected ({packed_size(d)},)")
    M = np.empty((d, d))
    _kernels.unpack_packed(packed, _row_offsets(d), M)
    return M


class SymmetricMatrix:
    """A symmetric d×d matrix unpacked from its packed upper triangle, multiplied with BLAS.

    Unpacking writes both triangles in one compiled pass
    (:func:`streammom._kernels.unpack_packed`) so that products are plain ``gemm``: at refit
    time the products with C (or M2) are memory-bound, and a full float32 ``sgemm`` runs in
    about half the time of ``ssymm`` on the triangle, which more than pays for the mirror.
    ``buffer`` (d, d, C-contiguous, of ``dtype``) is reused when given.
    """

    def __init__(
        self,
        packed: np.ndarray,
        d: int,
        *,
        buffer: np.ndarray | None = None,
        dtype: type = np.float64,
    ) -> None:
        if packed.shape != (packed_size(d),):
            raise ValueError(f"packed array has shape {packed.shape}, expected ({packed_size(d)},)")
        self.n = d
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise ValueError("dtype must be float64 or float32")
        if (buffer is None or buffer.shape != (d, d) or buffer.dtype != dt
                or not buffer.flags.c_contiguous):
            buffer = np.empty((d, d), dtype=dt)
        _kernels.unpack_packed(packed, _row_offsets(d), buffer)
        self._full = buffer

    def matmul(self, B: np.ndarray) -> np.ndarray:
        """A @ B for a (d,) or (d, k) array (float64 result; float32 arithmetic if so built)."""
        B = np.asarray(B, dtype=self._full.dtype)
        return np.asarray(self._full @ B, dtype=np.float64)

    def diagonal(self) -> np.ndarray:
        return np.diagonal(self._full).copy()


def packed_outer(Z: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Row-wise packed outer products: row i is the packed upper triangle of z_i z_iᵀ.

    With ``weights``, row i is scaled by w_i (as (w_i z_ia) z_ib). Built on the transposed
    (m(m+1)/2, n) layout, one contiguous multiply per basis column; the result is a transposed
    view of that buffer.
    """
    n, m = Z.shape
    Zt = np.ascontiguousarray(Z.T)
    Ft = np.empty((m * (m + 1) // 2, n))
    _packed_outer_rows(Zt, Zt if weights is None else Zt * weights, Ft)
    return Ft.T


def _packed_outer_rows(Zt: np.ndarray, Zwt: np.ndarray, out: np.ndarray) -> None:
    """out[(a, b)] = Zwt[a] * Zt[b] for a ≤ b (packed order): rows of z zᵀ, transposed."""
    m = Zt.shape[0]
    o = 0
    for i in range(m):
        np.multiply(Zwt[i], Zt[i:], out=out[o : o + m - i])
        o += m - i


def rotate_packed_third(T: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Change the basis of packed slices: T'_r = Qᵀ T_r Q for every r (Q: m × m')."""
    m, m2 = Q.shape
    a, b = _triu(m)
    full = np.zeros((T.shape[0], m, m))
    full[:, a, b] = T
    full[:, b, a] = T
    rot = np.einsum("pa,rpq,qb->rab", Q, full, Q, optimize=True)
    a2, b2 = _triu(m2)
    return np.ascontiguousarray(rot[:, a2, b2])


def row_sums(X: sp.csr_array) -> np.ndarray:
    """Per-row totals t_i = Σ_h x_ih of a CSR array (document lengths for count data)."""
    n = X.shape[0]
    rows = np.repeat(np.arange(n), np.diff(X.indptr))
    return np.bincount(rows, weights=X.data, minlength=n).astype(np.float64, copy=False)


def add_packed_gram(C: np.ndarray, X: sp.csr_array, w: np.ndarray) -> None:
    """C += packed upper triangle of Xᵀ diag(w) X, in place (X CSR with sorted indices).

    Each row adds w_i x_ip x_iq at every pair p ≤ q of its non-zeros
    (:func:`streammom._kernels.add_packed_gram`). Cost O(Σ_i nnz_i²/2) (design §3: "sparse
    updates cost nnz_i²"); never a dense d×d temporary.
    """
    _kernels.add_packed_gram(C, _row_offsets(X.shape[1]), X.indptr, X.indices, X.data, w, 0,
                             X.shape[0])


def _as_csr(X: Any, d: int) -> sp.csr_array:
    if not sp.issparse(X):
        X = sp.csr_array(np.asarray(X, dtype=np.float64))
    X = sp.csr_array(X)
    if X.shape[1] != d:
        raise ValueError(f"X has {X.shape[1]} features, expected {d}")
    check_csr_structure(X)
    if X.dtype != np.float64:
        X = X.astype(np.float64)
    if not X.has_sorted_indices:
        X = X.copy()
        X.sort_indices()
    return X


class MomentAccumulator:
    """Running weighted moment sums of one node (design §3).

    Parameters
    ----------
    n_features:
        Dimension d.
    family:
        ``"bernoulli"`` (raw moments, D-SIDIWO / ASVTD) or ``"multinomial"`` (single-topic
        unbiased estimators; also keeps T1, T2, T3).
    basis:
        Optional orthonormal (d, m) tracked basis P; without one T is not accumulated.
    second_order:
        Keep C. The streaming engine turns C off on nodes whose C is assembled from children.

    >>> import scipy.sparse as sp
    >>> acc = MomentAccumulator(3)
    >>> acc.update(sp.csr_array(np.array([[1.0, 0, 1], [0, 1, 1]])))
    >>> acc.weight, acc.s.tolist()
    (2.0, [1.0, 1.0, 2.0])
    >>> acc.second_matrix().tolist()
    [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 2.0]]
    """

    def __init__(
        self,
        n_features: int,
        *,
        family: Family = "bernoulli",
        basis: np.ndarray | None = None,
        second_order: bool = True,
    ) -> None:
        check_family(family)
        d = int(n_features)
        if d < 1:
            raise ValueError("n_features must be positive")
        self.n_features = d
        self.family: Family = family
        self.weight = 0.0
        self.t1 = self.t2 = self.t3 = 0.0
        self.s = np.zeros(d)
        self.C: np.ndarray | None = np.zeros(packed_size(d)) if second_order else None
        self.basis: np.ndarray | None = None
        self.T: np.ndarray | None = None
        if basis is not None:
            self._set_basis_array(basis)
            self.T = np.zeros((d, self.packed_basis_size))

    # ------------------------------------------------------------------ properties
    @property
    def basis_dim(self) -> int:
        return 0 if self.basis is None else int(self.basis.shape[1])

    @property
    def tracks_third(self) -> bool:
        """True when the node keeps T (it has a tracked basis P and its sums)."""
        return self.basis is not None and self.T is not None

    @property
    def packed_basis_size(self) -> int:
        m = self.basis_dim
        return m * (m + 1) // 2

    def _set_basis_array(self, P: np.ndarray) -> None:
        P = np.ascontiguousarray(P, dtype=np.float64)
        if P.ndim != 2 or P.shape[0] != self.n_features or not 1 <= P.shape[1] <= self.n_features:
            raise ValueError(f"basis must have shape (d={self.n_features}, m), got {P.shape}")
        gram = P.T @ P
        if not np.allclose(gram, np.eye(P.shape[1]), atol=1e-8):
            raise ValueError("basis columns must be orthonormal")
        self.basis = P

    # ------------------------------------------------------------------ updates
    def update(
        self,
        X: Any,
        weights: np.ndarray | None = None,
        *,
        second: bool = True,
        third: bool = True,
        lengths: np.ndarray | None = None,
    ) -> None:
        """Add a batch of rows (vectorised; design §3).

        ``second`` / ``third`` switch the C and T updates off for this call (the engine adds C
        only at leaves); ``lengths`` may pass precomputed row totals t_i.
        """
        X = _as_csr(X, self.n_features)
        n = X.shape[0]
        if n == 0:
            return
        w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"weights has shape {w.shape}, expected ({n},)")
        self._update_csr(X, w, second=second, third=third, lengths=lengths)

    def _update_csr(
        self,
        X: sp.csr_array,
        w: np.ndarray,
        *,
        second: bool = True,
        third: bool = True,
        lengths: np.ndarray | None = None,
    ) -> None:
        """:meth:`update` without input validation (float64 CSR, sorted indices, w (n,))."""
        self.add_rows(X, w, 0, X.shape[0], second=second, third=third, lengths=lengths)

    def add_rows(
        self,
        X: sp.csr_array,
        w: np.ndarray,
        start: int,
        stop: int,
        *,
        second: bool = True,
        third: bool = True,
        lengths: np.ndarray | None = None,
    ) -> None:
        """Add rows start:stop of X with weights w[start:stop] (the engine's hot path).

        No validation: X is float64 CSR with sorted, in-range, duplicate-free indices
        (:func:`streammom._validation.as_csr`), w and ``lengths`` (row totals, optional) cover
        all of X. One compiled pass over the rows updates s and, with a basis, T
        (:func:`streammom._kernels.add_row_sums`); a second one C
        (:func:`streammom._kernels.add_packed_gram`). Cost O(nnz · m²/2 + Σ_i nnz_i²/2).
        """
        if stop <= start:
            return
        ws = w[start:stop]
        self.weight += float(ws.sum())
        if self.family == "multinomial":
            t = row_sums(X[start:stop]) if lengths is None else lengths[start:stop]
            n1, n2, n3 = single_topic_normalisers(ws, t)
            self.t1 += n1
            self.t2 += n2
            self.t3 += n3
        d = self.n_features
        if third and self.tracks_third:
            P, T = self.basis, self.T
        else:
            P = T = np.zeros((d, 0))
        _kernels.add_row_sums(X.indptr, X.indices, X.data, w, start, stop, P, T, self.s)
        if second and self.C is not None:
            _kernels.add_packed_gram(self.C, _row_offsets(d), X.indptr, X.indices, X.data, w,
                                     start, stop)

    def widen(self, d_new: int, *, C: bool = True) -> None:
        """Grow to ``d_new`` features whose sums are all zero (new vocabulary columns): s, C
        (``C=False`` leaves C to the caller), the basis P (zero rows: still orthonormal) and T
        (zero rows: no event has touched the new columns). Exact; O(d_new² + d_new·m²)."""
        d = self.n_features
        if d_new == d:
            return
        if d_new < d:
            raise ValueError(f"cannot narrow an accumulator from {d} to {d_new} features")
        self.s = np.concatenate([self.s, np.zeros(d_new - d)])
        if C and self.C is not None:
            self.C = widen_packed(self.C, d, d_new)
        if self.basis is not None:
            self.basis = np.vstack([self.basis, np.zeros((d_new - d, self.basis.shape[1]))])
        if self.T is not None:
            self.T = np.vstack([self.T, np.zeros((d_new - d, self.T.shape[1]))])
        self.n_features = d_new

    def _third_increment(self, X: sp.csr_array, w: np.ndarray) -> np.ndarray:
        """Xᵀ F, F row i = w_i packed(z_i z_iᵀ), z = Pᵀ x_i."""
        assert self.basis is not None
        Z = np.asarray(X @ self.basis)
        return np.asarray(X.T @ packed_outer(Z, w))

    def merge(self, other: MomentAccumulator) -> MomentAccumulator:
        """Add another accumulator's sums (exact; same d, family and basis required)."""
        if other.n_features != self.n_features or other.family != self.family:
            raise ValueError("can only merge accumulators with the same d and family")
        if (self.basis is None) != (other.basis is None) or (
            self.basis is not None and not np.array_equal(self.basis, other.basis)
        ):
            raise ValueError("can only merge accumulators with the same tracked basis")
        if (self.C is None) != (other.C is None):
            raise ValueError("both accumulators must keep C, or neither")
        self.weight += other.weight
        self.t1 += other.t1
        self.t2 += other.t2
        self.t3 += other.t3
        self.s += other.s
        if self.C is not None and other.C is not None:
            self.C += other.C
        if self.T is not None and other.T is not None:
            self.T += other.T
        return self

    def decay(self, factor: float) -> None:
        """Multiply every sum by ``factor`` (exact exponential forgetting, design §3)."""
        f = float(factor)
        if not np.isfinite(f) or f < 0:
            raise ValueError(f"decay factor must be finite and non-negative, got {factor!r}")
        self.weight *= f
        self.t1 *= f
        self.t2 *= f
        self.t3 *= f
        self.s *= f
        if self.C is not None:
            self.C *= f
        if self.T is not None:
            self.T *= f

    def copy(self) -> MomentAccumulator:
        out = MomentAccumulator.__new__(MomentAccumulator)
        out.__dict__.update(self.__dict__)
        out.s = self.s.copy()
        out.C = None if self.C is None else self.C.copy()
        out.T = None if self.T is None else self.T.copy()
        return out

    # ------------------------------------------------------------------ basis
    def set_basis(
        self,
        P: np.ndarray,
        *,
        rows: Any = None,
        row_weight: float = 0.0,
    ) -> None:
        """Move T to the basis P (design §3 "basis drift").

        The part of T inside the old span is rotated exactly: with a = Qᵀ Pᵀ x, Q = Pᵀ P', the
        new coordinates are P'ᵀ x = a + b, b = P'ᵀ (I − P Pᵀ) x, and Σ x_r a aᵀ = Qᵀ T_r Q. The
        remaining terms Σ x_r (a bᵀ + b aᵀ + b bᵀ) are estimated from ``rows`` (a reservoir
        sample), each row standing for ``row_weight``. Without an old basis T is filled from
        ``rows`` alone. Exact when the rows are every event so far with ``row_weight`` 1, or
        when span(P') ⊆ span(P).
        """
        old = self.basis
        oldT = self.T
        self._set_basis_array(P)
        P = self.basis
        assert P is not None
        X = None if rows is None else _as_csr(rows, self.n_features)
        if old is None or oldT is None:
            T = np.zeros((self.n_features, self.packed_basis_size))
            if X is not None and X.shape[0]:
                T += self._third_increment(X, np.full(X.shape[0], float(row_weight)))
            self.T = T
            return
        Q = old.T @ P
        T = rotate_packed_third(oldT, Q)
        if X is not None and X.shape[0] and row_weight > 0:
            Zold = np.asarray(X @ old) @ Q
            Znew = np.asarray(X @ P)
            F = packed_outer(Znew) - packed_outer(Zold)
            T += row_weight * np.asarray(X.T @ F)
        self.T = T

    def basis_residual(self, Epinv: np.ndarray) -> float:
        """‖E† − E† P Pᵀ‖_F / ‖E†‖_F: how far the whitening leaves span(P) (1 without basis)."""
        if self.basis is None:
            return 1.0
        E = np.asarray(Epinv, dtype=np.float64)
        res = E - (E @ self.basis) @ self.basis.T
        den = float(np.linalg.norm(E))
        return float(np.linalg.norm(res) / den) if den > 0 else 0.0

    # ------------------------------------------------------------------ moments
    def second_matrix(self, C: np.ndarray | None = None) -> np.ndarray:
        """The dense C = Σ w x xᵀ (or the given packed override)."""
        packed = self.C if C is None else C
        if packed is None:
            raise ValueError("this accumulator keeps no C; pass the assembled packed C")
        return unpack_symmetric(packed, self.n_features)

    def first_moment(self) -> np.ndarray:
        """M1 = s / W (Bernoulli) or s / T1 (single topic); zeros for an empty node."""
        den = self.t1 if self.family == "multinomial" else self.weight
        return self.s / den if den > 0 else np.zeros(self.n_features)

    def second_moment(self, C: np.ndarray | None = None) -> np.ndarray:
        """Dense M2: C / W (raw) or (C − diag s) / T2 (single topic, thesis Thm 3.2.1)."""
        M = self.second_matrix(C)
        require_positive(self.family, self.weight if self.family == "bernoulli" else self.t2, 2)
        if self.family == "bernoulli":
            M /= self.weight
        else:
            M[np.diag_indices_from(M)] -= self.s
            M /= self.t2
        return M

    def third_slices(
        self,
        Epinv: np.ndarray,
        *,
        second: np.ndarray | None = None,
        c_times: Any = None,
    ) -> np.ndarray:
        """Packed whitened slices (d, 3) [H_00, H_01, H_11] for a whitening E† (2, d).

        Raw: H_r = B T_r Bᵀ / W with B = E† P. Single topic: (B T_r Bᵀ + corrections) / T3 with
        the corrections of :func:`~streammom.estimators.single_topic_third_corrections`, which need
        products with C: ``c_times(B)`` if given, else the dense C (``second``, or unpacked).
        Exact when the rows of E† lie in span(P).
        """
        if not self.tracks_third:
            raise ValueError("no tracked basis: third-order slices are not available")
        E = np.asarray(Epinv, dtype=np.float64)
        B = E @ self.basis  # (k, m)
        m = self.basis_dim
        a, b = _triu(m)
        off = a != b
        K = np.empty((a.size, 3))
        for col, (p, q) in enumerate(((0, 0), (0, 1), (1, 1))):
            K[:, col] = B[p, a] * B[q, b] + off * B[p, b] * B[q, a]
        raw = self.T @ K
        require_positive(self.family, self.weight if self.family == "bernoulli" else self.t3, 3)
        if self.family == "bernoulli":
            return raw / self.weight
        if c_times is None:
            Cd = self.second_matrix() if second is None else second

            def c_times(M: np.ndarray) -> np.ndarray:
                return Cd @ M

        return (raw + single_topic_third_corrections(c_times, self.s, E)) / self.t3

    def node_moments(self, C: np.ndarray | None = None, *, m2: Any = None) -> NodeMoments:
        """:class:`~streammom.estimators.NodeMoments` from the sums (``C``: packed override).

        ``m2`` may pass a precomputed M2 (dense or operator) so it is not unpacked again.
        """
        Cd = self.second_matrix(C) if self.family == "multinomial" else None
        if m2 is None:
            m2 = self.second_moment(C)

        def third(Epinv: np.ndarray) -> np.ndarray:
            return self.third_slices(Epinv, second=Cd)

        return NodeMoments(m2=m2, m1=self.first_moment(), third=third)

    # ------------------------------------------------------------------ archive
    def to_archive(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able scalars + arrays (names without prefix)."""
        meta: dict[str, Any] = {
            "n_features": self.n_features,
            "family": self.family,
            "weight": float(self.weight),
            "t1": float(self.t1),
            "t2": float(self.t2),
            "t3": float(self.t3),
            "has_C": self.C is not None,
            "basis_dim": self.basis_dim,
        }
        arrays: dict[str, np.ndarray] = {"s": self.s}
        if self.C is not None:
            arrays.update(packed_archive(self.C))
        if self.basis is not None and self.T is not None:
            arrays["P"] = self.basis
            arrays["T"] = self.T
        return meta, arrays

    @classmethod
    def from_archive(
        cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
    ) -> MomentAccumulator:
        """Inverse of :meth:`to_archive` (arrays are copied, validated for shape)."""
        d = int(meta["n_features"])
        out = cls(d, family=meta["family"], second_order=bool(meta["has_C"]))
        out.weight = float(meta["weight"])
        out.t1, out.t2, out.t3 = float(meta["t1"]), float(meta["t2"]), float(meta["t3"])
        out.s = np.array(arrays["s"], dtype=np.float64)
        if out.s.shape != (d,):
            raise ValueError("accumulator archive: s has the wrong shape")
        if meta["has_C"]:
            out.C = packed_from_archive(arrays, packed_size(d))
        if int(meta["basis_dim"]):
            out.basis = np.array(arrays["P"], dtype=np.float64)
            out.T = np.array(arrays["T"], dtype=np.float64)
            m = out.basis.shape[1]
            if out.basis.shape[0] != d or out.T.shape != (d, m * (m + 1) // 2):
                raise ValueError("accumulator archive: basis or T has the wrong shape")
        return out
