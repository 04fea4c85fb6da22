"""Mergeable, decayable moment accumulators with a tracked third-order basis (design §3).

One :class:`MomentAccumulator` holds the running sums of one tree node, with event weights w_i:

===========  ======================  =====================================================
sum          shape                   note
===========  ======================  =====================================================
W = Σ w      scalar                  M1 = s / W (Bernoulli) or s / T1 (single topic)
s = Σ w x    (d,)
C = Σ w xxᵀ  packed upper, d(d+1)/2  raw M2 = C / W; single topic (C − diag s) / T2;
                                     or the weighted rows (:mod:`streammom.rowgram`)
T            (d, m(m+1)/2)           T_r = Σ w x_r (Pᵀx)(Pᵀx)ᵀ packed, P: d×m orthonormal
T1, T2, T3   scalars                 Σ w t, Σ w t(t−1), Σ w t(t−1)(t−2) (thesis Thm 3.2.1)
===========  ======================  =====================================================

All sums are linear in the data, so :meth:`~MomentAccumulator.merge` (same basis) and
:meth:`~MomentAccumulator.decay` are exact. The whitened third-order slices for any whitening
E† whose rows lie in span(P) follow from T without ever forming the d³ tensor (design §3):
with B = E† P (2×m), H_r = B T_r Bᵀ / W (raw moments, D-SIDIWO / ASVTD), plus, for counts, the
repeated-index corrections of the single-topic estimator over T3 (thesis digest part 1 §4.5).

Packed storage (layout, archiving, widening) lives in :mod:`streammom.packed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from streammom import _kernels
from streammom._validation import check_csr_structure, with_int32_indices
from streammom.estimators import (
    Family,
    NodeMoments,
    check_family,
    require_positive,
    single_topic_normalisers,
    single_topic_third_corrections,
)
from streammom.packed import (
    Packed,
    SparsePacked,
    add_into,
    dense,
    packed_archive,
    packed_from_archive,
    packed_outer,
    packed_size,
    rotate_packed_third,
    row_offsets,
    triu,
    unpack_symmetric,
    widen_packed,
    zero_packed_lines,
)
from streammom.rowgram import RowGram, rows_limit

__all__ = ["MomentAccumulator", "row_sums"]

def row_sums(X: sp.csr_array) -> np.ndarray:
    """Per-row totals t_i = Σ_h x_ih of a CSR array (document lengths for count data)."""
    n = X.shape[0]
    rows = np.repeat(np.arange(n), np.diff(X.indptr))
    return np.bincount(rows, weights=X.data, minlength=n).astype(np.float64, copy=False)


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
    return with_int32_indices(X)  # one index type for the kernels, as as_csr gives them


def _sum_second(a: Packed, b: Packed, d: int) -> Packed:
    """a + b for any two representations of C: rows stay rows while under the limit,
    a sparse offset stays sparse, anything else is a dense packed array."""
    if isinstance(a, RowGram) and isinstance(b, RowGram):
        rows = RowGram(d, a.blocks + b.blocks)
        return rows if rows.nnz <= rows_limit(d) else rows.to_dense()
    if isinstance(a, np.ndarray):
        add_into(a, b)
        return a
    total = dense(b).copy()
    add_into(total, a)
    return SparsePacked.from_dense(total) if isinstance(a, SparsePacked) else total


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
        self.C: Packed | None = np.zeros(packed_size(d)) if second_order else None
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
        Row-held C (:class:`~streammom.rowgram.RowGram`) keeps the rows instead, O(nnz), and
        is packed once they pass :func:`~streammom.rowgram.rows_limit`.
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
        if not second or self.C is None:
            return
        if isinstance(self.C, RowGram):
            self.C.append(X, w, start, stop)
            if self.C.nnz > rows_limit(d):
                self.C = self.C.to_dense()
        else:
            _kernels.add_packed_gram(self.C, row_offsets(d), X.indptr, X.indices, X.data, w,
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
            self.C = (widen_packed(self.C, d, d_new) if isinstance(self.C, np.ndarray)
                      else self.C.widen(d, d_new))
        if self.basis is not None:
            self.basis = np.vstack([self.basis, np.zeros((d_new - d, self.basis.shape[1]))])
        if self.T is not None:
            self.T = np.vstack([self.T, np.zeros((d_new - d, self.T.shape[1]))])
        self.n_features = d_new

    def remove_columns(self, columns: np.ndarray, positions: np.ndarray | None = None) -> None:
        """Remove features ``columns`` from the sums (a recycled vocabulary column, design §2).

        Exact for W (events stay), s and C (their lines are the removed features' sums, set
        to zero). T: its slices T_r, r ∈ columns, are dropped, and the tracked basis moves off
        the removed rows — P̃ = P with those rows zeroed, P̃ = QR, the new basis Q and
        T_r ← R⁻ᵀ T_r R⁻¹, exact for every event without a removed feature (z' = Qᵀx =
        R⁻ᵀ P̃ᵀ x = R⁻ᵀ z); events that had one are off by their x_j P_j term, a share of T
        bounded by the removed features' weight (the rarest columns). A basis that lived on
        the removed rows (|R_ii| < 10⁻³) is dropped with T: the next refit rebuilds both from
        the reservoir, as a rebase does. Single-topic sums (T2, T3 need each document's length
        without the removed tokens) cannot be corrected and are refused. ``positions``: the
        columns' packed positions (:func:`~streammom.packed.packed_line_positions`), when the
        caller removes the same columns from many nodes.
        """
        cols = np.asarray(columns, dtype=np.int64)
        if cols.size == 0:
            return
        if self.family != "bernoulli":
            raise ValueError("columns can be removed exactly from Bernoulli sums only")
        self.s[cols] = 0.0
        if isinstance(self.C, np.ndarray) and positions is not None:
            self.C[positions] = 0.0
        elif self.C is not None:
            zero_packed_lines(self.C, cols, self.n_features)
        if self.basis is None:
            return
        P = self.basis.copy()
        P[cols] = 0.0
        Q, R = np.linalg.qr(P)
        diag = np.diag(R)
        if np.min(np.abs(diag)) < 1e-3:
            self.basis = self.T = None
            return
        sign = np.where(diag < 0, -1.0, 1.0)
        Q, R = Q * sign, R * sign[:, None]
        Q[cols] = 0.0  # exactly: a new token on a recycled column starts outside the basis
        self.basis = np.ascontiguousarray(Q)
        if self.T is not None:
            self.T = rotate_packed_third(self.T, np.linalg.inv(R))
            self.T[cols] = 0.0

    def _add_third_rows(self, T: np.ndarray, X: sp.csr_array, w: np.ndarray) -> None:
        """T += Xᵀ F, F row i = w_i packed(z_i z_iᵀ), z = Pᵀ x_i: the update's compiled pass
        (:func:`streammom._kernels.add_row_sums`), its column sums into a scratch vector."""
        assert self.basis is not None
        X = with_int32_indices(X)
        _kernels.add_row_sums(X.indptr, X.indices, X.data, np.ascontiguousarray(w, np.float64),
                              0, X.shape[0], self.basis, T, np.zeros(self.n_features))

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
            self.C = _sum_second(self.C, other.C, self.n_features)
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
        row_weight: float | np.ndarray = 0.0,
    ) -> None:
        """Move T to the basis P (design §3 "basis drift").

        The part of T inside the old span is rotated exactly: with a = Qᵀ Pᵀ x, Q = Pᵀ P', the
        new coordinates are P'ᵀ x = a + b, b = P'ᵀ (I − P Pᵀ) x, and Σ x_r a aᵀ = Qᵀ T_r Q. The
        remaining terms Σ x_r (a bᵀ + b aᵀ + b bᵀ) are estimated from ``rows`` (a reservoir
        sample), each row standing for ``row_weight`` (a scalar, or one weight a row). Without
        an old basis T is filled from ``rows`` alone. Exact when the rows are every event so
        far with their weights (a row-held node, :mod:`streammom.rowgram`), or when
        span(P') ⊆ span(P).
        """
        old = self.basis
        oldT = self.T
        self._set_basis_array(P)
        P = self.basis
        assert P is not None
        X = None if rows is None else _as_csr(rows, self.n_features)
        n = 0 if X is None else X.shape[0]
        per_row = np.ndim(row_weight) == 1  # one weight a row (exact rows, design §3)
        if old is None or oldT is None:
            T = np.zeros((self.n_features, self.packed_basis_size))
            if X is not None and n:
                w = (np.asarray(row_weight, dtype=np.float64) if per_row
                     else np.full(n, float(row_weight)))
                self._add_third_rows(T, X, w)
            self.T = T
            return
        Q = old.T @ P
        T = rotate_packed_third(oldT, Q)
        if X is not None and n and (per_row or row_weight > 0):
            Zold = np.asarray(X @ old) @ Q
            Znew = np.asarray(X @ P)
            F = packed_outer(Znew) - packed_outer(Zold)
            if per_row:
                T += np.asarray(X.T @ (F * np.asarray(row_weight, dtype=np.float64)[:, None]))
            else:
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
        packed = dense(self.C) if C is None and self.C is not None else C
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
        a, b = triu(m)
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
            out.C = (RowGram.from_archive(arrays, d) if "C_rows_w" in arrays
                     else packed_from_archive(arrays, packed_size(d)))
        if int(meta["basis_dim"]):
            out.basis = np.array(arrays["P"], dtype=np.float64)
            out.T = np.array(arrays["T"], dtype=np.float64)
            m = out.basis.shape[1]
            if out.basis.shape[0] != d or out.T.shape != (d, m * (m + 1) // 2):
                raise ValueError("accumulator archive: basis or T has the wrong shape")
        return out
