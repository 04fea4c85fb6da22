"""Input validation at the library boundary (scikit-learn style)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "as_csr",
    "as_weights",
    "check_csr_structure",
    "check_random_state_int",
    "with_int32_indices",
]


def as_csr(X: Any, n_features: int | None = None, *, name: str = "X") -> sp.csr_array:
    """Return ``X`` as a float64 CSR array with sorted indices, validating shape and values.

    Accepts scipy.sparse matrices/arrays and dense array-likes. Rejects non-2-D input, NaN or
    infinite values, negative entries (moments of counts and indicators are non-negative) and a
    wrong number of columns.
    """
    if sp.issparse(X):
        out = sp.csr_array(X, dtype=np.float64)
    else:
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {arr.shape}")
        out = sp.csr_array(arr)
    if out.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {out.shape}")
    if n_features is not None and out.shape[1] != n_features:
        raise ValueError(f"{name} has {out.shape[1]} features, expected {n_features}")
    data = out.data
    if data.size and not np.isfinite(data).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    if data.size and data.min() < 0:
        raise ValueError(f"{name} contains negative values; counts or indicators expected")
    check_csr_structure(out, name=name)
    out.sum_duplicates()
    out.sort_indices()
    return with_int32_indices(out)


def with_int32_indices(X: sp.csr_array) -> sp.csr_array:
    """The same canonical array (sorted, duplicate-free) with int32 ``indices``/``indptr``
    when they fit (scipy's own choice for small arrays): one index type for the compiled kernels
    (no second compile for int64 input) and half the index traffic. Arrays too large for int32
    keep int64."""
    limit = np.iinfo(np.int32).max
    if (X.indices.dtype == np.int32 and X.indptr.dtype == np.int32) or max(
            X.nnz, X.shape[1]) >= limit:
        return X
    out = sp.csr_array((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                       shape=X.shape)
    out.has_sorted_indices = True
    out.has_canonical_format = True
    return out


def check_csr_structure(X: sp.csr_array, *, name: str = "X") -> None:
    """Reject a CSR array whose row pointers or column indices are out of range.

    scipy builds ``csr_array((data, indices, indptr))`` without checking that the indices lie
    in [0, n_features); the compiled kernels (:mod:`streammom._kernels`) do not bounds-check,
    so every array that reaches them passes here first. O(nnz).
    """
    indptr, indices = X.indptr, X.indices
    n, d = X.shape
    if indptr.shape != (n + 1,) or int(indptr[0]) != 0 or int(indptr[-1]) != indices.size:
        raise ValueError(f"{name} has an inconsistent CSR row pointer")
    if n and bool((np.diff(indptr) < 0).any()):
        raise ValueError(f"{name} has a decreasing CSR row pointer")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= d):
        raise ValueError(f"{name} has column indices outside [0, {d})")


def as_weights(weights: Any, n: int) -> np.ndarray:
    """Per-row weights as a float64 vector of length ``n`` (ones when ``None``); must be ≥ 0."""
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.shape != (n,):
        raise ValueError(f"weights has shape {w.shape}, expected ({n},)")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("weights must be finite and non-negative")
    return w


def check_random_state_int(random_state: Any) -> int:
    """Only integer seeds: results must be reproducible byte for byte."""
    if isinstance(random_state, bool) or not isinstance(random_state, int | np.integer):
        raise TypeError(f"random_state must be an int, got {type(random_state).__name__}")
    return int(random_state)
