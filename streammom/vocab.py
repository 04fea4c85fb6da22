"""Feature index: tokens (diagnosis codes, words) → columns of a sparse event matrix (design §2).

A :class:`Vocabulary` is either **fixed** (a token list or a file with one token per line) or
**growing**: unseen tokens take the next free column until ``capacity`` columns are used, in
order of first appearance, so the same stream always gives the same index. The matrix width is
``capacity`` (unused columns are all-zero and named ""); the engine keeps state only for the
columns in use (design §3 "width").

A full growing vocabulary **follows the stream** (design §2 "vocabulary"). It counts every
column's occurrences, and tokens that do not fit go to a Misra–Gries summary of ``candidates``
counters (Misra & Gries 1982; merged batch-wise as in Agarwal et al., "Mergeable summaries",
2012): a counter never overestimates, and every token with more than N/(k+1) of the N dropped
occurrences keeps one. At the engine's refits (:meth:`plan_recycling`), a candidate whose count
exceeds ``margin`` times the count of the rarest column takes that column over; the engine
removes the column's sums first, and the new token inherits its candidate count
(Space-Saving's rule, Metwally et al. 2005), so it is not the next to go. Junk codes that
filled the vocabulary early are replaced by the codes that matter. Dropped occurrences count
in :attr:`Vocabulary.oov_count`, recycled columns in :attr:`Vocabulary.recycled_count`.

An optional :class:`~streammom.rollup.CodeRollup` maps codes to coarser groups before the
lookup (ICD-9 ``250.01`` → ``250`` with ``prefix=3``, as the papers truncate ICD-9).

>>> v = Vocabulary(capacity=4)
>>> X = v.transform([["I10", "E11"], ["E11", "J45", "I10"]])
>>> X.toarray().tolist()
[[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
>>> v.feature_names
('I10', 'E11', 'J45', '')
>>> v = Vocabulary(capacity=2)
>>> _ = v.transform([["junk1", "junk2"]] + [["I10", "E11"]] * 5)
>>> v.tokens, v.oov_count, v.plan_recycling(max_columns=2)
(('junk1', 'junk2'), 10, [(0, 'E11'), (1, 'I10')])
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from streammom.rollup import CodeRollup
from streammom.serialization import SnapshotFormatError, check_manifest

__all__ = ["Vocabulary"]

#: Version 2 adds column counts, candidates and the roll-up; version 1 archives still load.
VOCAB_SCHEMA_VERSION = 2

#: Default share of a column's count a candidate must exceed to take the column over.
RECYCLE_MARGIN = 2.0


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
    candidates:
        Counters of the Misra–Gries summary of tokens that do not fit a full growing
        vocabulary (default ``max(64, capacity // 4)``).
    rollup:
        Optional :class:`~streammom.rollup.CodeRollup` applied to every token first.
    """

    def __init__(
        self,
        tokens: Iterable[str] | None = None,
        *,
        capacity: int = 1024,
        growing: bool | None = None,
        candidates: int | None = None,
        rollup: CodeRollup | None = None,
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
        if candidates is None:
            candidates = max(64, self.capacity // 4)
        if isinstance(candidates, bool) or not isinstance(candidates, int | np.integer) \
                or candidates < 1:
            raise ValueError(f"candidates must be a positive int, got {candidates!r}")
        if rollup is not None and not isinstance(rollup, CodeRollup):
            raise TypeError(f"rollup must be a CodeRollup, got {type(rollup).__name__}")
        self.candidate_slots = int(candidates)
        self.rollup = rollup
        self.counts = np.zeros(self.capacity)  # occurrences (events, for code sets) per column
        self._candidates: dict[str, float] = {}  # Misra–Gries counters of tokens left out
        self.recycled_count = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        capacity: int | None = None,
        growing: bool = False,
        rollup: CodeRollup | None = None,
    ) -> Vocabulary:
        """One token per line (surrounding whitespace stripped, blank lines skipped).

        Fixed by default; ``growing=True`` starts from the file and grows up to ``capacity``.
        """
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        toks = [ln.strip() for ln in lines if ln.strip()]
        cap = capacity if capacity is not None else max(len(toks), 1)
        return cls(toks, capacity=cap, growing=growing, rollup=rollup)

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

    @property
    def is_full(self) -> bool:
        """A growing vocabulary with every column taken (new tokens become candidates)."""
        return self.growing and len(self._tokens) >= self.capacity

    @property
    def candidates(self) -> dict[str, float]:
        """The Misra–Gries counters of tokens waiting for a column (a copy)."""
        return dict(self._candidates)

    @property
    def n_candidates(self) -> int:
        """How many tokens wait for a column."""
        return len(self._candidates)

    def index(self, token: str) -> int:
        """Column of a known token (KeyError otherwise)."""
        return self._index[token]

    def _lookup(self, token: Any, *, grow: bool = True) -> int:
        """Column of ``token``, -1 when unknown; an unknown token takes the next free column
        of a growing vocabulary when ``grow``."""
        tok = _check_token(token)
        col = self._index.get(tok)
        if col is None and grow and self.growing and len(self._tokens) < self.capacity:
            col = len(self._tokens)
            self._index[tok] = col
            self._tokens.append(tok)
        return -1 if col is None else col

    # ------------------------------------------------------------------ transform
    def transform(self, events: Sequence[Any], *, binary: bool = True, update: bool = True
                  ) -> sp.csr_array:
        """Events → CSR (n × n_features), growing the vocabulary when allowed.

        Each event is a list of tokens (codes or words; repeats count when ``binary=False``)
        or a ``{token: count}`` mapping with non-negative integer counts. ``binary=True`` keeps
        indicators (code sets); ``binary=False`` keeps counts (documents). Out-of-vocabulary
        token occurrences are dropped and added to :attr:`oov_count`.

        ``update=False`` only looks the tokens up: no column is added, nothing is counted, the
        vocabulary is left exactly as it was (tokens it does not know are dropped). The rows
        of events routed while their learning waits (:mod:`streammom.background_refits`).

        >>> v = Vocabulary(capacity=4)
        >>> v.transform([["I10"]], update=False).nnz, len(v), v.oov_count
        (0, 0, 0)
        """
        if isinstance(events, str | bytes | Mapping):
            raise TypeError("events must be a sequence of events (token lists or count dicts)")
        if not isinstance(events, Sequence):
            events = list(events)
        if all(type(e) is list for e in events):
            fast = self._transform_lists(events, binary=binary, update=update)
            if fast is not None:
                return fast
        return self._transform_general(events, binary=binary, update=update)

    def _transform_lists(self, events: Sequence[list[Any]], *, binary: bool, update: bool = True
                         ) -> sp.csr_array | None:
        """:meth:`transform` of token lists, vectorised: one dict lookup per token occurrence
        (``map`` of ``dict.get``), new tokens numbered in order of first appearance, rows built
        by one sort of ``row · d + column`` keys (duplicates counted). None when a token is
        not hashable (the general path then raises the error it names)."""
        flat: list[Any] = []
        for event in events:
            flat.extend(event)
        if self.rollup is not None:
            try:
                flat = [self.rollup(t) for t in flat]
            except (TypeError, AttributeError):
                return None
        get = self._index.get
        try:
            cols = np.fromiter(map(get, flat, repeat(-1)), dtype=np.int64, count=len(flat))
        except TypeError:
            return None
        unseen = np.flatnonzero(cols < 0).tolist()
        grows = update and self.growing and not self.is_full
        for i in unseen if grows else ():  # check, grow in stream order
            cols[i] = self._lookup(flat[i])
        n, d = len(events), self.n_features
        rows = np.repeat(np.arange(n, dtype=np.int64),
                         np.fromiter(map(len, events), dtype=np.int64, count=n))
        known = cols >= 0
        dropped = Counter(flat[i] for i in np.flatnonzero(~known).tolist())
        for tok in dropped if not grows else ():  # checked once per distinct token
            _check_token(tok)
        keys, mult = np.unique(rows[known] * d + cols[known], return_counts=True)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // d, minlength=n), out=indptr[1:])
        data = np.ones(keys.size) if binary else mult.astype(np.float64)
        indices = (keys % d).astype(np.int32)
        if update:
            self._tally(indices, data, dropped)
        return sp.csr_array((data, indices, indptr), shape=(n, d))

    def _transform_general(self, events: Sequence[Any], *, binary: bool, update: bool = True
                           ) -> sp.csr_array:
        """:meth:`transform` of any events (count dicts, tuples, …), one token at a time."""
        indptr = [0]
        cols: list[int] = []
        vals: list[float] = []
        dropped: Counter[str] = Counter()
        rollup = self.rollup
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
                if rollup is not None:
                    tok = rollup(_check_token(tok))
                col = self._lookup(tok, grow=update)
                if col < 0:
                    dropped[tok] += int(cnt)
                    continue
                row[col] = row.get(col, 0.0) + float(cnt)
            for col in sorted(row):
                cols.append(col)
                vals.append(1.0 if binary else row[col])
            indptr.append(len(cols))
        n = len(indptr) - 1
        data, indices = np.asarray(vals, dtype=np.float64), np.asarray(cols, dtype=np.int32)
        if update:
            self._tally(indices, data, dropped)
        return sp.csr_array((data, indices, np.asarray(indptr, dtype=np.int64)),
                            shape=(n, self.n_features))

    # ------------------------------------------------------------------ following the stream
    def _tally(self, indices: np.ndarray, data: np.ndarray, dropped: Mapping[str, int]) -> None:
        """Count a transformed batch: its entries per column, its dropped occurrences (OOV),
        offered to the candidates."""
        self.counts += np.bincount(indices, weights=data, minlength=self.capacity)
        if dropped:
            self.oov_count += int(sum(dropped.values()))
            self._offer(dropped)

    def _offer(self, dropped: Mapping[str, float]) -> None:
        """Add dropped occurrences to the candidates' Misra–Gries summary (full growing
        vocabulary only). Batch merge (Agarwal et al. 2012, §3): add the counts, then if more
        than k counters remain subtract the (k+1)-th largest from all and keep the positive
        ones. Every count stays ≤ the token's true count; deterministic (ties by token)."""
        if not dropped or not self.is_full:
            return
        cand = self._candidates
        for tok, c in dropped.items():
            cand[tok] = cand.get(tok, 0.0) + float(c)
        k = self.candidate_slots
        if len(cand) > k:
            cut = np.partition(np.fromiter(cand.values(), dtype=np.float64, count=len(cand)),
                               len(cand) - k - 1)[len(cand) - k - 1]
            self._candidates = {t: c - cut for t, c in cand.items() if c > cut}

    def decay(self, factor: float) -> None:
        """Scale every column count and candidate counter by ``factor`` ∈ (0, 1] (the engine's
        forgetting between refits), so the vocabulary follows a drifting stream."""
        if not 0.0 < factor <= 1.0:
            raise ValueError(f"decay factor must be in (0, 1], got {factor!r}")
        if factor < 1.0:
            self.counts *= factor
            self._candidates = {t: c * factor for t, c in self._candidates.items()}

    def plan_recycling(self, *, margin: float = RECYCLE_MARGIN, max_columns: int | None = None
                       ) -> list[tuple[int, str]]:
        """Columns to hand to candidates: ``[(column, token), …]``, most frequent candidate to
        the rarest column, while the candidate's count > ``margin`` × the column's count (and
        ≥ 2: a token seen once is noise). At most ``max_columns`` (default capacity // 4)
        pairs. Does not change the vocabulary (:meth:`recycle` does, after the caller has
        removed the columns' sums)."""
        if not self.is_full or not self._candidates:
            return []
        limit = max(1, self.capacity // 4) if max_columns is None else int(max_columns)
        ranked = sorted(self._candidates.items(), key=lambda tc: (-tc[1], tc[0]))[:limit]
        rare = np.argsort(self.counts, kind="stable")[: len(ranked)]
        out: list[tuple[int, str]] = []
        for (tok, c), col in zip(ranked, rare.tolist(), strict=False):
            if c < 2.0 or c <= margin * self.counts[col]:
                break
            out.append((int(col), tok))
        return out

    def recycle(self, swaps: Sequence[tuple[int, str]]) -> None:
        """Give each ``column`` to its candidate ``token`` (from :meth:`plan_recycling`): the
        old token leaves, the new one inherits its candidate count."""
        for col, tok in swaps:
            old = self._tokens[col]
            del self._index[old]
            self._index[tok] = col
            self._tokens[col] = tok
            self.counts[col] = self._candidates.pop(tok)
        self.recycled_count += len(swaps)

    def reset_counts(self) -> None:
        """Zero the column counts, candidates and OOV count (a fork's vocabulary: its counts
        are added back by :meth:`merge`)."""
        self.counts[:] = 0.0
        self._candidates = {}
        self.oov_count = 0

    def merge(self, other: Vocabulary) -> None:
        """Add another vocabulary's counts (same tokens in the same columns, e.g. a fork's):
        column counts and OOV counts add, candidate summaries merge (Misra–Gries)."""
        if other.tokens != self.tokens or other.capacity != self.capacity:
            raise ValueError("cannot merge vocabularies with different tokens or capacities")
        self.counts += other.counts
        self.oov_count += other.oov_count
        self._offer(other._candidates)

    # ------------------------------------------------------------------ archive
    def to_archive(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Manifest (tokens, capacity, growing, OOV and recycled counts, column counts of the
        columns in use, candidates sorted by token, roll-up) and no arrays."""
        manifest = {
            "format": "streammom",
            "kind": "vocabulary",
            "schema_version": VOCAB_SCHEMA_VERSION,
            "tokens": list(self._tokens),
            "capacity": self.capacity,
            "growing": self.growing,
            "oov_count": int(self.oov_count),
            "recycled_count": int(self.recycled_count),
            "counts": self.counts[: len(self._tokens)].tolist(),
            "candidate_slots": self.candidate_slots,
            "candidates": sorted(self._candidates.items()),
            "rollup": None if self.rollup is None else self.rollup.to_manifest(),
        }
        return manifest, {}

    @classmethod
    def from_archive(
        cls, manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None
    ) -> Vocabulary:
        """Inverse of :meth:`to_archive`."""
        check_manifest(manifest, kind="vocabulary", schema_version=VOCAB_SCHEMA_VERSION,
                       what="vocabulary", also_reads=(1,))
        try:
            toks = list(manifest["tokens"])
            growing = bool(manifest["growing"])
            rollup = manifest.get("rollup")
            out = cls(toks if (toks or growing) else None, capacity=int(manifest["capacity"]),
                      growing=growing, candidates=manifest.get("candidate_slots"),
                      rollup=None if rollup is None else CodeRollup.from_manifest(rollup))
            out.oov_count = int(manifest["oov_count"])
            out.recycled_count = int(manifest.get("recycled_count", 0))
            counts = np.asarray(manifest.get("counts", np.zeros(len(toks))), dtype=np.float64)
            if counts.shape != (len(toks),) or not (np.isfinite(counts).all()
                                                    and (counts >= 0).all()):
                raise ValueError("counts must be one finite non-negative number per token")
            out.counts[: len(toks)] = counts
            cand = {_check_token(t): float(c) for t, c in manifest.get("candidates", [])}
            if any(not (np.isfinite(c) and c > 0) or t in out._index for t, c in cand.items()):
                raise ValueError("candidates must be new tokens with positive counts")
            if len(cand) > out.candidate_slots:
                raise ValueError("more candidates than candidate slots")
            out._candidates = cand
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotFormatError(f"malformed vocabulary: {exc!r}") from exc
        return out

    def __repr__(self) -> str:
        kind = "growing" if self.growing else "fixed"
        return (f"Vocabulary({kind}, {len(self)}/{self.capacity} tokens, oov={self.oov_count}, "
                f"recycled={self.recycled_count})")
