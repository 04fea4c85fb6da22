"""A bounded, seeded, recency-biased sample of a node's events (design §5 "reservoir").

Children of a new split, rebuilt subtrees and basis repairs start from it. Rows are stored
padded ((R, L) column indices and values, L = the widest row so far, R ≤ K the slots filled so
far, grown geometrically: a node that has seen few events holds few rows), so keeping an event
is one row write in a compiled pass over the batch (:func:`streammom._kernels.reservoir_offer`).

Sampling is a weighted reservoir (Chao 1982): event i, arriving when the node's accumulated
weight including it is W_i, enters with probability p_i = min(1, K w_i / W_i) and replaces a
uniform slot (⌊K u_i / p_i⌋ from the same uniform u_i that decided it). Under the engine's lazy
exponential decay w_i grows like 2^(age/H), so the sample follows the decayed distribution of
the node (recent events are favoured exactly as the sums favour them). Until the reservoir is
full every event is kept, in arrival order, so the reservoir then *is* the node's data. The
random numbers come from the generator the caller passes
(``np.random.default_rng([seed, node_id, counter])`` in the engine), so runs replay exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from streammom import _kernels
from streammom._validation import with_int32_indices

__all__ = ["Reservoir"]

_MIN_WIDTH = 8
_MIN_ROWS = 16


class Reservoir:
    """At most ``capacity`` sparse rows of dimension ``n_features``."""

    def __init__(self, capacity: int, n_features: int) -> None:
        if capacity < 1:
            raise ValueError("reservoir capacity must be positive")
        self.capacity = int(capacity)
        self.n_features = int(n_features)
        self.n_filled = 0
        rows = min(self.capacity, _MIN_ROWS)
        self.indices = np.zeros((rows, _MIN_WIDTH), dtype=np.int32)
        self.values = np.zeros((rows, _MIN_WIDTH))
        self.lengths = np.zeros(rows, dtype=np.int32)

    def __len__(self) -> int:
        return self.n_filled

    # ------------------------------------------------------------------ updates
    def _ensure(self, rows: int, width: int) -> None:
        """Room for ``rows`` slots (≤ capacity) of ``width`` entries; both grow geometrically."""
        have_rows, have_width = self.indices.shape
        if rows <= have_rows and width <= have_width:
            return
        new_rows = (have_rows if rows <= have_rows
                    else min(self.capacity, max(rows, 2 * have_rows)))
        new_width = have_width if width <= have_width else max(width, 2 * have_width)
        idx = np.zeros((new_rows, new_width), dtype=np.int32)
        val = np.zeros((new_rows, new_width))
        lens = np.zeros(new_rows, dtype=np.int32)
        idx[:have_rows, :have_width] = self.indices
        val[:have_rows, :have_width] = self.values
        lens[:have_rows] = self.lengths
        self.indices, self.values, self.lengths = idx, val, lens

    def offer(
        self,
        X: sp.csr_array,
        weights: np.ndarray,
        weight_before: float,
        rng: np.random.Generator,
        *,
        start: int = 0,
    ) -> None:
        """Offer rows start:start+len(weights) of X with (stored) weights.

        ``weight_before``: the node's weight before these rows. ``start`` lets the engine offer
        a node's slice of a sorted batch without building a sub-matrix.
        """
        n = len(weights)
        if n == 0:
            return
        if start < 0 or start + n > X.shape[0]:
            raise ValueError("rows start:start+len(weights) are outside X")
        w = np.asarray(weights, dtype=np.float64)
        lens = np.diff(X.indptr[start : start + n + 1])
        self._ensure(min(self.capacity, self.n_filled + n), int(lens.max()))
        u = rng.random(n)
        self.n_filled = int(_kernels.reservoir_offer(
            X.indptr, X.indices, X.data, w, start, u, float(weight_before), self.n_filled,
            self.capacity, self.indices, self.values, self.lengths))

    def remove_columns(self, columns: np.ndarray) -> None:
        """Drop features ``columns`` from every stored row (a recycled vocabulary column); a
        row keeps its slot, its other entries in order. O(capacity · width)."""
        k = self.n_filled
        if k == 0 or len(columns) == 0:
            return
        idx, val = self.indices[:k], self.values[:k]
        removed = np.zeros(self.n_features, dtype=bool)
        removed[columns] = True
        keep = (np.arange(idx.shape[1])[None, :] < self.lengths[:k, None]) & ~removed[idx]
        order = np.argsort(~keep, axis=1, kind="stable")  # kept entries first, in order
        idx[:] = np.take_along_axis(idx, order, axis=1)
        val[:] = np.take_along_axis(val, order, axis=1)
        self.lengths[:k] = keep.sum(axis=1)
        tail = np.arange(idx.shape[1])[None, :] >= self.lengths[:k, None]
        idx[tail] = 0
        val[tail] = 0.0

    # ------------------------------------------------------------------ views
    def to_csr(self) -> sp.csr_array:
        """The stored rows as a CSR array (n_filled × n_features), in slot order."""
        k = self.n_filled
        lens = self.lengths[:k].astype(np.int64)
        L = self.indices.shape[1]
        mask = np.arange(L)[None, :] < lens[:, None]
        indptr = np.concatenate(([0], np.cumsum(lens)))
        X = sp.csr_array(
            (self.values[:k][mask], self.indices[:k][mask], indptr),
            shape=(k, self.n_features),
        )
        X.sort_indices()
        # int32 index arrays, like the engine's batches: one argument type for the kernels.
        return with_int32_indices(X)

    def subset(self, rows: np.ndarray, capacity: int | None = None) -> Reservoir:
        """A new reservoir holding the given stored rows (in that order)."""
        cap = self.capacity if capacity is None else int(capacity)
        rows = np.asarray(rows, dtype=np.int64)[:cap]
        out = Reservoir(cap, self.n_features)
        n = rows.size
        out._ensure(n, self.indices.shape[1])
        out.indices[:n] = self.indices[rows]
        out.values[:n] = self.values[rows]
        out.lengths[:n] = self.lengths[rows]
        out.n_filled = n
        return out

    @staticmethod
    def combine(
        parts: list[tuple[Reservoir, float]], capacity: int, rng: np.random.Generator
    ) -> Reservoir:
        """A reservoir sampling the union of several, each weighted by its node weight.

        Each stored row of part j stands for weight_j / n_j; ``capacity`` rows are drawn without
        replacement with probability proportional to that (all rows when they fit).
        """
        n_features = parts[0][0].n_features
        width = max(r.indices.shape[1] for r, _ in parts)
        idx, val, lens, p = [], [], [], []
        for res, weight in parts:
            k = res.n_filled
            if k == 0:
                continue
            pad = width - res.indices.shape[1]
            idx.append(np.pad(res.indices[:k], ((0, 0), (0, pad))))
            val.append(np.pad(res.values[:k], ((0, 0), (0, pad))))
            lens.append(res.lengths[:k])
            p.append(np.full(k, max(float(weight), 0.0) / k))
        if not idx:
            out = Reservoir(capacity, n_features)
            out._ensure(0, width)
            return out
        return Reservoir._drawn(np.vstack(idx), np.vstack(val), np.concatenate(lens),
                                np.concatenate(p), capacity, n_features, rng)

    @staticmethod
    def from_rows(X: sp.csr_array, weights: np.ndarray, capacity: int,
                  rng: np.random.Generator) -> Reservoir:
        """A reservoir sampling the rows of ``X``, row i standing for ``weights[i]`` events:
        ``capacity`` rows drawn without replacement with probability proportional to their
        weights (all rows when they fit), as :meth:`combine` draws. A subtree rebuilt from
        the reservoirs of the one it replaces starts its nodes' samples so
        (:mod:`streammom.refit`)."""
        X = sp.csr_array(X)
        lens = np.diff(X.indptr).astype(np.int32)
        width = max(_MIN_WIDTH, int(lens.max()) if lens.size else 0)
        Ix = np.zeros((X.shape[0], width), dtype=np.int32)
        V = np.zeros((X.shape[0], width))
        mask = np.arange(width)[None, :] < lens[:, None]
        Ix[mask] = X.indices
        V[mask] = X.data
        return Reservoir._drawn(Ix, V, lens, np.maximum(np.asarray(weights, float), 0.0),
                                capacity, X.shape[1], rng)

    @staticmethod
    def _drawn(Ix: np.ndarray, V: np.ndarray, Ln: np.ndarray, pr: np.ndarray, capacity: int,
               n_features: int, rng: np.random.Generator) -> Reservoir:
        """A reservoir of ``capacity`` of the padded rows (Ix, V, Ln) drawn without replacement
        with probability ∝ ``pr`` (all of them when they fit; uniformly when no row has
        weight), kept in their order."""
        out = Reservoir(capacity, n_features)
        width = Ix.shape[1]
        out._ensure(0, width)
        total = Ix.shape[0]
        if total <= capacity:
            chosen = np.arange(total)
        else:
            if pr.sum() <= 0:
                pr = np.ones(total)
            nz = int(np.count_nonzero(pr))
            size = min(capacity, nz)
            chosen = np.sort(rng.choice(total, size=size, replace=False, p=pr / pr.sum()))
        n = chosen.size
        out._ensure(n, width)
        out.indices[:n, :width] = Ix[chosen]
        out.values[:n, :width] = V[chosen]
        out.lengths[:n] = Ln[chosen]
        out.n_filled = n
        return out

    # ------------------------------------------------------------------ archive
    def to_archive(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        k = self.n_filled
        L = int(self.lengths[:k].max()) if k else 0
        meta = {"capacity": self.capacity, "n_features": self.n_features, "n_filled": k,
                "width": int(self.indices.shape[1])}
        arrays = {
            "res_idx": np.ascontiguousarray(self.indices[:k, :L]),
            "res_val": np.ascontiguousarray(self.values[:k, :L]),
            "res_len": self.lengths[:k].copy(),
        }
        return meta, arrays

    @classmethod
    def from_archive(cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Reservoir:
        out = cls(int(meta["capacity"]), int(meta["n_features"]))
        k = int(meta["n_filled"])
        if not 0 <= k <= out.capacity:
            raise ValueError("reservoir archive: inconsistent shapes")
        out._ensure(k, int(meta["width"]))
        idx = np.asarray(arrays["res_idx"], dtype=np.int32)
        val = np.asarray(arrays["res_val"], dtype=np.float64)
        lens = np.asarray(arrays["res_len"], dtype=np.int32)
        if not (0 <= k <= out.capacity) or lens.shape != (k,) or idx.shape != val.shape:
            raise ValueError("reservoir archive: inconsistent shapes")
        out.indices[:k, : idx.shape[1]] = idx
        out.values[:k, : val.shape[1]] = val
        out.lengths[:k] = lens
        out.n_filled = k
        return out
