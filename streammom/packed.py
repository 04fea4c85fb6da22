"""Packed storage of symmetric d × d sums (design §3): the layout, conversions, widening,
archiving (dense or sparse) and the products the accumulators need.

Packed layout: row-major upper triangle, the order of ``np.triu_indices`` — entry (i, j), i ≤ j,
sits at i(2d − i − 1)/2 + j. A d × d symmetric matrix takes d(d+1)/2 doubles.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from streammom import _kernels

if TYPE_CHECKING:
    import scipy.sparse as sp

    from streammom.rowgram import RowGram

__all__ = [
    "Packed",
    "SparsePacked",
    "SymmetricMatrix",
    "add_into",
    "add_packed_gram",
    "dense",
    "pack_symmetric",
    "packed_archive",
    "packed_from_archive",
    "packed_line_positions",
    "packed_outer",
    "packed_row_col",
    "packed_size",
    "rotate_packed_third",
    "row_offsets",
    "triu",
    "unpack_symmetric",
    "widen_packed",
    "zero_packed_lines",
]


def packed_size(d: int) -> int:
    """Number of entries of the packed upper triangle of a d×d symmetric matrix."""
    return d * (d + 1) // 2


@lru_cache(maxsize=8)
def row_offsets(d: int) -> np.ndarray:
    i = np.arange(d, dtype=np.int64)
    out = (i * (2 * d - i - 1)) // 2
    out.setflags(write=False)
    return out


@lru_cache(maxsize=32)
def triu(m: int) -> tuple[np.ndarray, np.ndarray]:
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
    a, b = triu(A.shape[0])
    return A[a, b]


#: Store C as its non-zero entries when at most this share of it is non-zero: co-occurrence of
#: codes is sparse (0.5 % of a 4,096-column C on a Zipf encounter stream), and a checkpoint
#: then writes and deflates kilobytes instead of d²/2 doubles per node.
_SPARSE_ARCHIVE_DENSITY = 0.25


class SparsePacked:
    """A packed symmetric matrix held as its non-zero entries (positions ascending, values).

    The frozen second-order sums of an internal node — its part from before the split
    (design §3) — change only at refits and are sparse on code streams (0.5 % non-zero at
    d = 4,096), so they are held this way; leaves keep dense arrays for the hot path.

    >>> C = SparsePacked.from_dense(np.array([0.0, 2.0, 0.0]))
    >>> out = np.ones(3); C.add_to(out); out.tolist(), C.to_dense().tolist()
    ([1.0, 3.0, 1.0], [0.0, 2.0, 0.0])
    """

    __slots__ = ("at", "size", "val")

    def __init__(self, at: np.ndarray, val: np.ndarray, size: int) -> None:
        self.at, self.val, self.size = at, val, int(size)

    @classmethod
    def from_dense(cls, C: np.ndarray) -> SparsePacked:
        at = np.flatnonzero(C).astype(np.int64)
        return cls(at, C[at], C.size)

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    def to_dense(self) -> np.ndarray:
        out = np.zeros(self.size)
        out[self.at] = self.val
        return out

    def add_to(self, out: np.ndarray, sign: float = 1.0) -> None:
        """``out += sign · self`` (positions are distinct)."""
        out[self.at] += self.val if sign == 1.0 else sign * self.val

    def copy(self) -> SparsePacked:
        return SparsePacked(self.at.copy(), self.val.copy(), self.size)

    def __imul__(self, factor: float) -> SparsePacked:
        self.val *= factor
        return self

    def widen(self, d: int, d_new: int) -> SparsePacked:
        """The same entries in the packed layout of d_new ≥ d columns (cf. :func:`widen_packed`)."""
        old, new = row_offsets(d), row_offsets(d_new)
        row = np.searchsorted(old + np.arange(d), self.at, side="right") - 1
        return SparsePacked(self.at - old[row] + new[row], self.val.copy(), packed_size(d_new))

    def zero_lines(self, columns: np.ndarray, d: int) -> None:
        """Drop every entry in the rows and columns ``columns`` (in place; cf.
        :func:`zero_packed_lines`)."""
        row, col = packed_row_col(self.at, d)
        keep = ~(np.isin(row, columns) | np.isin(col, columns))
        self.at, self.val = self.at[keep], self.val[keep]


#: A node's second-order sums: dense packed, sparse packed, or held as rows
#: (:class:`streammom.rowgram.RowGram`).
Packed: TypeAlias = "np.ndarray | SparsePacked | RowGram"


def packed_row_col(at: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of packed upper-triangle positions ``at`` (row ≤ column).

    >>> [r.tolist() for r in packed_row_col(np.array([0, 2, 3, 5]), 3)]
    [[0, 0, 1, 2], [0, 2, 1, 2]]
    """
    off = row_offsets(d)
    row = np.searchsorted(off + np.arange(d), at, side="right") - 1
    return row, at - off[row]


def zero_packed_lines(C: Packed, columns: np.ndarray, d: int) -> None:
    """Set rows and columns ``columns`` of a packed symmetric matrix to zero, in place:
    the sums of the data with those features removed (exact). O(|columns| · d).

    >>> C = pack_symmetric(np.arange(9.0).reshape(3, 3) + np.arange(9.0).reshape(3, 3).T)
    >>> zero_packed_lines(C, np.array([1]), 3); unpack_symmetric(C, 3).tolist()
    [[0.0, 0.0, 8.0], [0.0, 0.0, 0.0], [8.0, 0.0, 16.0]]
    """
    if not isinstance(C, np.ndarray):
        C.zero_lines(columns, d)
        return
    C[packed_line_positions(columns, d)] = 0.0


def packed_line_positions(columns: np.ndarray, d: int) -> np.ndarray:
    """Packed positions of every entry in the rows and columns ``columns`` (with repeats).

    >>> packed_line_positions(np.array([1]), 3).tolist()
    [1, 3, 4]
    """
    off = row_offsets(d)
    parts = []
    for j in np.asarray(columns, dtype=np.int64).tolist():
        parts.append(off[:j] + j)  # (i, j), i < j
        parts.append(np.arange(off[j] + j, off[j] + d))  # (j, k), k ≥ j
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def add_into(out: np.ndarray, C: Packed, sign: float = 1.0) -> None:
    """``out += sign · C`` for a dense, sparse or row-held C (anything with ``add_to``)."""
    if isinstance(C, np.ndarray):
        if sign == 1.0:
            out += C
        elif sign == -1.0:
            out -= C
        else:
            out += sign * C
    else:
        C.add_to(out, sign)


def dense(C: Packed) -> np.ndarray:
    """C as a dense packed array (the array itself when it is one)."""
    return C if isinstance(C, np.ndarray) else C.to_dense()


def packed_archive(C: Packed) -> dict[str, np.ndarray]:
    """The archive arrays of a packed C: ``C`` (dense), or ``C_at`` (int64 positions, ascending)
    + ``C_val`` (their values) when at most a quarter of it is non-zero. Exact either way, and
    the same bytes whether C is held dense or sparse.

    >>> sorted(packed_archive(np.array([0.0, 2.0, 0.0, 0.0, 0.0])).items())
    [('C_at', array([1])), ('C_val', array([2.]))]

    A row-held C archives its rows (:meth:`streammom.rowgram.RowGram.archive`).
    """
    if not isinstance(C, np.ndarray | SparsePacked):
        return C.archive()
    if isinstance(C, SparsePacked):
        keep = C.val != 0
        at, val = C.at[keep], C.val[keep]
        if at.size > _SPARSE_ARCHIVE_DENSITY * C.size:
            return {"C": C.to_dense()}
        return {"C_at": at, "C_val": val}
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
    old, new = row_offsets(d), row_offsets(d_new)  # entry (i, j ≥ i) is at offsets[i] + j
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
    _kernels.unpack_packed(packed, row_offsets(d), M)
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
        _kernels.unpack_packed(packed, row_offsets(d), buffer)
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
    """Change the basis of packed slices: T'_r = Qᵀ T_r Q for every r (Q: m × m').

    One product T K, K the packed congruence of Q (m(m+1)/2 × m'(m'+1)/2): a slice stores
    S_ab once for a ≤ b, and (QᵀSQ)_ce = Σ_{a<b} S_ab (Q_ac Q_be + Q_bc Q_ae) + Σ_a S_aa Q_ac Q_ae.
    O(d · m² · m'²), no (d, m, m) temporaries.

    >>> Q = np.array([[0.0, 1.0], [1.0, 0.0]])  # swap the two axes
    >>> rotate_packed_third(np.array([[1.0, 2.0, 3.0]]), Q).tolist()  # [[1, 2], [2, 3]]
    [[3.0, 2.0, 1.0]]
    """
    m, m2 = Q.shape
    a, b = triu(m)
    c, e = triu(m2)
    K = Q[a][:, c] * Q[b][:, e] + Q[b][:, c] * Q[a][:, e]
    K[a == b] *= 0.5
    return np.ascontiguousarray(T @ K)


def add_packed_gram(C: np.ndarray, X: sp.csr_array, w: np.ndarray) -> None:
    """C += packed upper triangle of Xᵀ diag(w) X, in place (X CSR with sorted indices).

    Each row adds w_i x_ip x_iq at every pair p ≤ q of its non-zeros
    (:func:`streammom._kernels.add_packed_gram`). Cost O(Σ_i nnz_i²/2) (design §3: "sparse
    updates cost nnz_i²"); never a dense d×d temporary.
    """
    _kernels.add_packed_gram(C, row_offsets(X.shape[1]), X.indptr, X.indices, X.data, w, 0,
                             X.shape[0])
