"""Feature index: tokens (diagnosis codes, words) → columns of a sparse event matrix (design §2).

A :class:`Vocabulary` is either **fixed** (a token list or a file with one token per line) or
**growing**: unseen tokens take the next free column until ``capacity`` columns are used. The
matrix dimension of a growing vocabulary is ``capacity`` from the start, so moment sums keep
their shape while the vocabulary fills (unused columns are all-zero and named ""). Tokens that
do not fit (fixed vocabulary, or capacity exhausted) are dropped and counted in
:attr:`Vocabulary.oov_count`. Columns are assigned in order of first appearance, so the same
stream always gives the same index.

>>> v = Vocabulary(capacity=4)
>>> X = v.transform([["I10", "E11"], ["E11", "J45", "I10"]])
>>> X.toarray().tolist()
[[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
>>> v.feature_names
('I10', 'E11', 'J45', '')
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from streammom.serialization import SnapshotFormatError, check_manifest

__all__ = ["Vocabulary"]

VOCAB_SCHEMA_VERSION = 1


def _check_token(tok: Any) -> str:
    if not isinstance(tok, str):
        raise TypeError(f"tokens must be str, got {type(tok).__name__}: {tok!r}")
    if not tok:
        raise ValueError("tokens must be non-empty strings")
    return tok


class Vocabulary:
    """Token → column index, fixed or growing up to ``capacity``.

    Parameters
    ----------
    tokens:
        Initial tokens (distinct, non-empty strings).
    capacity:
        Number of columns of a growing vocabulary (its ``n_features``).
    growing:
        Whether unseen tokens are added. Default: growing when no ``tokens`` are given, fixed
        when they are.
    """

    def __init__(
        self,
        tokens: Iterable[str] | None = None,
        *,
        capacity: int = 4096,
        growing: bool | None = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer):
            raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
        if capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        if isinstance(tokens, str):
            raise TypeError("tokens must be an iterable of strings, not a single string")
        toks = [_check_token(t) for t in tokens] if tokens is not None else []
        self.growing = (tokens is None) if growing is None else bool(growing)
        if self.growing and len(toks) > capacity:
            raise ValueError(f"{len(toks)} tokens do not fit in capacity {capacity}")
        if not self.growing and not toks:
            raise ValueError("a fixed vocabulary needs at least one token")
        self.capacity = int(capacity) if self.growing else len(toks)
        self._index: dict[str, int] = {}
        for t in toks:
            if t in self._index:
                raise ValueError(f"duplicate token {t!r}")
            self._index[t] = len(self._index)
        self._tokens: list[str] = list(toks)
        self.oov_count = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        capacity: int | None = None,
        growing: bool = False,
    ) -> Vocabulary:
        """One token per line (surrounding whitespace stripped, blank lines skipped).

        Fixed by default; ``growing=True`` starts from the file and grows up to ``capacity``.
        """
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        toks = [ln.strip() for ln in lines if ln.strip()]
        cap = capacity if capacity is not None else max(len(toks), 1)
        return cls(toks, capacity=cap, growing=growing)

    # ------------------------------------------------------------------ queries
    @property
    def n_features(self) -> int:
        """Matrix width: ``capacity`` when growing, the number of tokens when fixed."""
        return self.capacity

    @property
    def tokens(self) -> tuple[str, ...]:
        """Known tokens in column order."""
        return tuple(self._tokens)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """One name per column (``n_features`` long); unused slots are ""."""
        return tuple(self._tokens) + ("",) * (self.capacity - len(self._tokens))

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._index

    def index(self, token: str) -> int:
        """Column of a known token (KeyError otherwise)."""
        return self._index[token]

    def _lookup(self, token: Any) -> int:
        tok = _check_token(token)
        col = self._index.get(tok)
        if col is None and self.growing and len(self._tokens) < self.capacity:
            col = len(self._tokens)
            self._index[tok] = col
            self._tokens.append(tok)
        return -1 if col is None else col

    # ------------------------------------------------------------------ transform
    def transform(self, events: Sequence[Any], *, binary: bool = True) -> sp.csr_array:
        """Events → CSR (n × n_features), growing the vocabulary when allowed.

        Each event is a list of tokens (codes or words; repeats count when ``binary=False``)
        or a ``{token: count}`` mapping with non-negative integer counts. ``binary=True`` keeps
        indicators (code sets); ``binary=False`` keeps counts (documents). Out-of-vocabulary
        token occurrences are dropped and added to :attr:`oov_count`.
        """
        if isinstance(events, str | bytes | Mapping):
            raise TypeError("events must be a sequence of events (token lists or count dicts)")
        if not isinstance(events, Sequence):
            events = list(events)
        if all(type(e) is list for e in events):
            fast = self._transform_lists(events, binary=binary)
            if fast is not None:
                return fast
        return self._transform_general(events, binary=binary)

    def _transform_lists(self, events: Sequence[list[Any]], *, binary: bool
                         ) -> sp.csr_array | None:
        """:meth:`transform` of token lists, vectorised: one dict lookup per token occurrence
        (a list comprehension), new tokens numbered in order of first appearance, rows built
        by one sort of ``row · d + column`` keys (duplicates counted). None when a token is
        not hashable (the general path then raises the error it names)."""
        flat: list[Any] = []
        for event in events:
            flat.extend(event)
        get = self._index.get
        try:
            cols = np.fromiter([get(t, -1) for t in flat], dtype=np.int64, count=len(flat))
        except TypeError:
            return None
        for i in np.flatnonzero(cols < 0).tolist():  # unseen: check, grow in stream order
            cols[i] = self._lookup(flat[i])
        n, d = len(events), self.n_features
        rows = np.repeat(np.arange(n, dtype=np.int64),
                         np.fromiter(map(len, events), dtype=np.int64, count=n))
        known = cols >= 0
        self.oov_count += int(cols.size - np.count_nonzero(known))
        keys, mult = np.unique(rows[known] * d + cols[known], return_counts=True)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // d, minlength=n), out=indptr[1:])
        data = np.ones(keys.size) if binary else mult.astype(np.float64)
        return sp.csr_array((data, (keys % d).astype(np.int32), indptr), shape=(n, d))

    def _transform_general(self, events: Sequence[Any], *, binary: bool) -> sp.csr_array:
        """:meth:`transform` of any events (count dicts, tuples, …), one token at a time."""
        indptr = [0]
        cols: list[int] = []
        vals: list[float] = []
        oov = 0
        for pos, event in enumerate(events):
            row: dict[int, float] = {}
            if isinstance(event, Mapping):
                items: Iterable[tuple[Any, Any]] = event.items()
            elif isinstance(event, str | bytes):
                raise TypeError(f"event {pos}: a single string is not a token list")
            elif isinstance(event, Iterable):
                items = ((tok, 1) for tok in event)
            else:
                raise TypeError(f"event {pos}: expected a token list or a count dict")
            for tok, cnt in items:
                if isinstance(cnt, bool) or not isinstance(cnt, int | np.integer):
                    raise TypeError(f"event {pos}: count of {tok!r} must be an int, got {cnt!r}")
                if cnt < 0:
                    raise ValueError(f"event {pos}: count of {tok!r} is negative")
                if cnt == 0:
                    _check_token(tok)
                    continue
                col = self._lookup(tok)
                if col < 0:
                    oov += int(cnt)
                    continue
                row[col] = row.get(col, 0.0) + float(cnt)
            for col in sorted(row):
                cols.append(col)
                vals.append(1.0 if binary else row[col])
            indptr.append(len(cols))
        self.oov_count += oov
        n = len(indptr) - 1
        return sp.csr_array(
            (np.asarray(vals, dtype=np.float64), np.asarray(cols, dtype=np.int32),
             np.asarray(indptr, dtype=np.int64)),
            shape=(n, self.n_features),
        )

    # ------------------------------------------------------------------ archive
    def to_archive(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Manifest (tokens, capacity, growing, OOV count) and no arrays."""
        manifest = {
            "format": "streammom",
            "kind": "vocabulary",
            "schema_version": VOCAB_SCHEMA_VERSION,
            "tokens": list(self._tokens),
            "capacity": self.capacity,
            "growing": self.growing,
            "oov_count": int(self.oov_count),
        }
        return manifest, {}

    @classmethod
    def from_archive(
        cls, manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None
    ) -> Vocabulary:
        """Inverse of :meth:`to_archive`."""
        check_manifest(
            manifest, kind="vocabulary", schema_version=VOCAB_SCHEMA_VERSION, what="vocabulary"
        )
        try:
            toks = list(manifest["tokens"])
            growing = bool(manifest["growing"])
            out = cls(toks if (toks or growing) else None, capacity=int(manifest["capacity"]),
                      growing=growing)
            out.oov_count = int(manifest["oov_count"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotFormatError(f"malformed vocabulary: {exc!r}") from exc
        return out

    def __repr__(self) -> str:
        kind = "growing" if self.growing else "fixed"
        return f"Vocabulary({kind}, {len(self)}/{self.capacity} tokens, oov={self.oov_count})"
