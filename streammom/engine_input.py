"""What the streaming engine accepts as input, checked at its boundary.

A batch is a matrix (scipy.sparse or dense, n × d, non-negative; binary for the Bernoulli
family is the caller's choice) or — when the engine has a vocabulary — raw events: token lists
(``["E11.9", "I10"]``) or count mappings (``{"word": 3}``). One event (``learn_one`` /
``predict_one``) is a token list, a count mapping, or a vector of length d (dense or sparse, or
a batch of one row). Timestamps are finite event times in seconds, one per row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from streammom.vocab import Vocabulary

__all__ = ["check_timestamps", "looks_like_events", "one_event"]


def looks_like_events(X: Any) -> bool:
    """Raw events (token lists / count dicts) rather than a matrix-like batch."""
    if not isinstance(X, list | tuple) or not X:
        return False
    first = X[0]
    if isinstance(first, Mapping):
        return True
    return isinstance(first, list | tuple) and (not first or isinstance(first[0], str))


def one_event(event: Any, *, has_vocabulary: bool) -> Any:
    """A one-row batch from one event: ``[event]`` for a token list or count mapping (needs a
    vocabulary), a 1 × d array for a vector, dense or sparse (a 1-D sparse row, or a batch
    holding one row, is taken as that row).

    >>> import scipy.sparse as sp
    >>> one_event(sp.csr_array(np.eye(2, 3))[[1]], has_vocabulary=False).toarray().tolist()
    [[0.0, 1.0, 0.0]]
    >>> one_event(np.ones((2, 3)), has_vocabulary=False)
    Traceback (most recent call last):
    ...
    ValueError: one event must be a vector of length d (or one row), got shape (2, 3)
    """
    raw = isinstance(event, Mapping) or (
        isinstance(event, list | tuple) and (not event or isinstance(event[0], str)))
    if raw:
        if not has_vocabulary:
            raise ValueError("token lists and count mappings need an engine with a vocabulary "
                             "(StreamingHierarchy(vocabulary=Vocabulary()))")
        return [event]
    shape = event.shape if sp.issparse(event) else np.shape(event)
    if not (len(shape) == 1 or (len(shape) == 2 and shape[0] == 1)):
        raise ValueError(f"one event must be a vector of length d (or one row), got shape "
                         f"{shape}")
    if sp.issparse(event):
        return sp.csr_array(event.reshape(1, -1) if len(shape) == 1 else event)
    return np.asarray(event, dtype=np.float64).reshape(1, -1)


def check_timestamps(timestamps: Any, n: int, *, required: bool) -> np.ndarray | None:
    """``timestamps`` as a finite float64 vector of length n (None allowed unless
    ``required``: a half-life in seconds needs event times)."""
    if timestamps is None:
        if required and n:
            raise ValueError("half_life_unit='seconds' needs timestamps")
        return None
    ts = np.asarray(timestamps, dtype=np.float64).ravel()
    if ts.shape != (n,):
        raise ValueError(f"timestamps has shape {ts.shape}, expected ({n},)")
    if not np.isfinite(ts).all():
        raise ValueError("timestamps must be finite")
    return ts


#: The narrowest state (columns) an engine with a growing vocabulary starts with.
MIN_STATE_WIDTH = 64


def state_width(vocab: Vocabulary, d: int, used: int) -> int:
    """The state's width for ``used`` columns: at least 64, doubling (amortised O(1) copies
    per column), never above the vocabulary's capacity (design §3 "width").

    >>> state_width(Vocabulary(capacity=4096), 64, 65)
    128
    >>> state_width(Vocabulary(capacity=100), 64, 65)
    100
    """
    return min(vocab.n_features, max(used, 2 * d, MIN_STATE_WIDTH))


def columns_in_use(X: sp.csr_array, vocab: Vocabulary, d: int) -> int:
    """The width the state needs for ``X`` (the vocabulary's width, or the state's ``d``):
    ``d`` while the vocabulary's tokens and ``X``'s columns fit, else :func:`state_width`."""
    if X.shape[1] not in (vocab.n_features, d):
        raise ValueError(f"X has {X.shape[1]} features, expected {vocab.n_features} (the "
                         f"vocabulary's) or {d} (the columns in use)")
    used = max(len(vocab), int(X.indices.max()) + 1 if X.nnz else 0)
    return d if used <= d else state_width(vocab, d, used)


def narrow_columns(X: sp.csr_array, d: int) -> sp.csr_array:
    """``X`` with ``d`` columns (its indices all < d: the same arrays, a narrower shape)."""
    if X.shape[1] == d:
        return X
    out = sp.csr_array((X.data, X.indices, X.indptr), shape=(X.shape[0], d))
    out.has_sorted_indices = True
    return out
