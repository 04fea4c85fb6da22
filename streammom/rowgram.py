"""Second-order sums held as the weighted rows themselves (design §3 "row-backed sums").

C = Σ_i w_i x_i x_iᵀ needs d(d+1)/2 numbers packed, whatever the data. While a node has seen
few events, or its events are wide (genotype counts: ~1,100 non-zeros a row at d = 8,170), the
rows are far smaller than their Gram matrix: a :class:`RowGram` keeps them (CSR blocks with a
signed weight per row) and is exactly the same C —

* products for the eigen-solves: C V = Σ_b X_bᵀ (w_b ∘ X_b V), O(nnz · k) instead of O(d² k);
* merge = concatenation, decay = weights × f, widening = a wider shape, removing a feature =
  zeroing its entries: all exact, as for the packed sums;
* it becomes packed (:meth:`RowGram.to_dense`, the compiled Gram kernel) once its non-zeros
  pass :func:`rows_limit`, a tenth of the packed size: there the rows take 15 % of the packed
  bytes (12 bytes a non-zero against 8 a packed entry) and a sparse product costs about what
  the float32 ``sgemm`` on the unpacked matrix does (measured at d = 1,024 … 8,170; at a
  quarter the products were ~3× slower and the engine bench lost 10 % of its throughput).

Blocks are appended per batch and never modified in place (copies share them safely); the
engine :meth:`~RowGram.compact`\\ s every node's rows to one block at each refit, so products
sum in the same order whether the rows arrived in one batch or many, or from a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from streammom import _kernels
from streammom._validation import check_csr_structure
from streammom.packed import packed_size, row_offsets

__all__ = ["ROWS_PER_PACKED_ENTRY", "RowGram", "rows_limit"]

#: A node keeps rows while their non-zeros are at most this share of the packed C's entries.
ROWS_PER_PACKED_ENTRY = 0.1

#: Appended blocks merged into one when a node holds more (bounds the per-block overhead).
_MAX_BLOCKS = 32

Block = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # indptr, indices, data, w


def rows_limit(d: int) -> int:
    """Most non-zeros a node's rows may hold before its C is packed: ⌊r · d(d+1)/2⌋.

    >>> rows_limit(1_000)
    50050
    """
    return int(ROWS_PER_PACKED_ENTRY * packed_size(d))


class RowGram:
    """C = Σ_i w_i x_i x_iᵀ kept as CSR row blocks with signed weights (module docstring).

    >>> X = sp.csr_array(np.array([[1.0, 0, 2], [0, 1, 1]]))
    >>> C = RowGram(3); C.append(X, np.array([1.0, 2.0]), 0, 2)
    >>> C.matmul(np.eye(3)).tolist()
    [[1.0, 0.0, 2.0], [0.0, 2.0, 2.0], [2.0, 2.0, 6.0]]
    >>> C.to_dense().tolist()  # the packed upper triangle
    [1.0, 0.0, 2.0, 2.0, 2.0, 6.0]
    """

    __slots__ = ("blocks", "n_features", "n_rows", "nnz")

    def __init__(self, n_features: int, blocks: Iterable[Block] = ()) -> None:
        self.n_features = int(n_features)
        self.blocks: list[Block] = list(blocks)
        self.nnz = sum(int(b[1].size) for b in self.blocks)
        self.n_rows = sum(int(b[3].size) for b in self.blocks)

    @classmethod
    def concat(cls, parts: Sequence[RowGram], d: int) -> RowGram:
        """The sum of several row-held C's (their blocks, shared; each compacted first)."""
        blocks: list[Block] = []
        for part in parts:
            part.compact()
            blocks.extend(part.blocks)
        return cls(d, blocks)

    @property
    def size(self) -> int:
        """Entries of the packed C this stands for (the packed arrays' ``size``)."""
        return packed_size(self.n_features)

    # ------------------------------------------------------------------ updates
    def append(self, X: sp.csr_array, w: np.ndarray, start: int, stop: int) -> None:
        """Add rows start:stop of X (sorted indices) with weights w[start:stop] (copied)."""
        if stop <= start:
            return
        p0, p1 = int(X.indptr[start]), int(X.indptr[stop])
        indptr = X.indptr[start:stop + 1] - p0
        block = (indptr.astype(np.int64), X.indices[p0:p1].astype(np.int32),
                 np.array(X.data[p0:p1], dtype=np.float64),
                 np.array(w[start:stop], dtype=np.float64))
        self.blocks.append(block)
        self.nnz += p1 - p0
        self.n_rows += stop - start
        if len(self.blocks) > _MAX_BLOCKS:
            self.compact()

    def compact(self) -> None:
        """Merge the blocks into one (same rows, same order)."""
        if len(self.blocks) <= 1:
            return
        ptrs, total = [], 0
        for b in self.blocks:
            ptrs.append(b[0][:-1] + total)
            total += int(b[0][-1])
        ptrs.append(np.array([total], dtype=np.int64))
        self.blocks = [(np.concatenate(ptrs),
                        np.concatenate([b[1] for b in self.blocks]),
                        np.concatenate([b[2] for b in self.blocks]),
                        np.concatenate([b[3] for b in self.blocks]))]

    def rows(self) -> tuple[sp.csr_array, np.ndarray]:
        """All rows as one CSR array (n, d) and their weights (compacts)."""
        self.compact()
        if not self.blocks:
            return sp.csr_array((0, self.n_features)), np.zeros(0)
        return self._csr(self.blocks[0]), self.blocks[0][3]

    def _csr(self, b: Block) -> sp.csr_array:
        X = sp.csr_array((b[2], b[1], b[0]), shape=(b[3].size, self.n_features))
        X.has_sorted_indices = True
        return X

    def copy(self) -> RowGram:
        return RowGram(self.n_features, self.blocks)

    def __imul__(self, factor: float) -> RowGram:
        self.blocks = [(ip, ix, dt, w * factor) for ip, ix, dt, w in self.blocks]
        return self

    def widen(self, d: int, d_new: int) -> RowGram:
        """The same rows with ``d_new ≥ d`` features (the new columns are zero)."""
        if d_new < d:
            raise ValueError(f"cannot narrow row-held sums from {d} to {d_new}")
        return RowGram(d_new, self.blocks)

    def zero_lines(self, columns: np.ndarray, d: int) -> None:
        """Remove features ``columns`` from every row: rows and columns of C set to zero."""
        cols = np.asarray(columns)
        out = []
        for ip, ix, dt, w in self.blocks:
            hit = np.isin(ix, cols)
            if hit.any():
                dt = np.where(hit, 0.0, dt)
            out.append((ip, ix, dt, w))
        self.blocks = out

    # ------------------------------------------------------------------ products
    def matmul(self, B: np.ndarray) -> np.ndarray:
        """C @ B = Σ_b X_bᵀ (w_b ∘ (X_b B)) for a (d,) or (d, k) array (float64)."""
        B = np.asarray(B, dtype=np.float64)
        out = np.zeros(B.shape)
        for b in self.blocks:
            X = self._csr(b)
            Y = X @ B
            Y *= b[3] if B.ndim == 1 else b[3][:, None]
            out += X.T @ Y
        return out

    def add_to(self, out: np.ndarray, sign: float = 1.0) -> None:
        """``out += sign · C`` into a packed array (the compiled Gram kernel, row order)."""
        offsets = row_offsets(self.n_features)
        for ip, ix, dt, w in self.blocks:
            _kernels.add_packed_gram(out, offsets, ip, ix, dt, w if sign == 1.0 else sign * w,
                                     0, w.size)

    def to_dense(self) -> np.ndarray:
        """The packed C (d(d+1)/2 entries)."""
        out = np.zeros(packed_size(self.n_features))
        self.add_to(out)
        return out

    # ------------------------------------------------------------------ archive
    def archive(self) -> dict[str, np.ndarray]:
        """``C_rows_indptr``, ``C_rows_indices``, ``C_rows_data``, ``C_rows_w``: one block."""
        one = self.copy()
        one.compact()
        ip, ix, dt, w = one.blocks[0] if one.blocks else (
            np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0), np.zeros(0))
        return {"C_rows_indptr": ip, "C_rows_indices": ix, "C_rows_data": dt, "C_rows_w": w}

    @classmethod
    def from_archive(cls, arrays: Mapping[str, np.ndarray], d: int) -> RowGram:
        """Inverse of :meth:`archive`, validated (archives are data from outside)."""
        ip = np.asarray(arrays["C_rows_indptr"])
        ix = np.asarray(arrays["C_rows_indices"])
        dt = np.asarray(arrays["C_rows_data"])
        w = np.asarray(arrays["C_rows_w"])
        if (ip.ndim != 1 or ix.ndim != 1 or dt.shape != ix.shape or w.ndim != 1
                or ip.size != w.size + 1 or ip.dtype.kind not in "iu" or ix.dtype.kind not in "iu"
                or dt.dtype.kind != "f" or w.dtype.kind != "f"):
            raise ValueError("accumulator archive: row-held C is malformed")
        if not (np.isfinite(dt).all() and np.isfinite(w).all()):
            raise ValueError("accumulator archive: row-held C has non-finite values")
        X = sp.csr_array((dt.astype(np.float64), ix.astype(np.int32), ip.astype(np.int64)),
                         shape=(w.size, d))
        check_csr_structure(X)
        if not X.has_canonical_format:
            raise ValueError("accumulator archive: row-held C has unsorted or repeated indices")
        if w.size == 0:
            return cls(d)
        return cls(d, [(X.indptr.astype(np.int64), X.indices.astype(np.int32),
                        X.data.astype(np.float64), w.astype(np.float64))])
