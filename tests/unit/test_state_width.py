"""State sized by the columns in use (issue #14, item 1): the engine's sums start narrow and
grow with the vocabulary, geometrically, never past its capacity — exactly, with the same
routing."""

from __future__ import annotations

import numpy as np
import pytest

from streammom import StreamingHierarchy, Vocabulary
from streammom.packed import packed_size


def _events(rng: np.random.Generator, n: int, n_tokens: int, start: int = 0) -> list[list[str]]:
    """Two clusters over tokens start..start+n_tokens (each event ~6 tokens)."""
    half = n_tokens // 2
    out = []
    for i in range(n):
        base = start + (0 if i % 2 else half)
        picks = rng.choice(half, size=6, replace=False) + base
        out.append([f"t{j}" for j in sorted(picks)])
    return out


def _widths(eng: StreamingHierarchy) -> set[int]:
    return {v.acc.C.size for v in eng.nodes_.values()} | {v.acc.s.size for v in eng.nodes_.values()}


def test_state_grows_with_the_vocabulary_up_to_its_capacity() -> None:
    rng = np.random.default_rng(0)
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=300), refit_every=10**9)
    assert eng.n_features_ == 64  # not the 300-column capacity
    eng.learn(_events(rng, 200, 40))
    assert eng.n_features_ == 64 and _widths(eng) == {64, packed_size(64)}
    eng.learn(_events(rng, 200, 60, start=40))  # 100 tokens: doubled
    assert len(eng.vocabulary) == 100 and eng.n_features_ == 128
    assert _widths(eng) == {128, packed_size(128)}
    eng.learn(_events(rng, 400, 400, start=100))  # past the capacity: capped
    assert eng.n_features_ == 300 == eng.vocabulary.n_features
    assert eng.model_.n_features == 300


def test_widening_is_exact_and_keeps_the_routing() -> None:
    """Sums of a grown state equal those of a state built at full width (same additions),
    and widening a fitted tree routes every row as before."""
    rng = np.random.default_rng(1)
    first, later = _events(rng, 3000, 40), _events(rng, 500, 120, start=40)
    tokens = list(dict.fromkeys(t for e in first + later for t in e))  # first-seen order
    assert len(tokens) == 160
    grown = StreamingHierarchy(vocabulary=Vocabulary(capacity=160), refit_every=10**9)
    full = StreamingHierarchy(vocabulary=Vocabulary(tokens, capacity=160), refit_every=10**9)
    assert grown.n_features_ == 64 and full.n_features_ == 160
    for batch in (first, later):
        grown.learn(batch)
        full.learn(batch)
    a, b = grown.node_accumulator(0), full.node_accumulator(0)
    d = grown.n_features_
    assert d == 160 and np.array_equal(a.s, b.s)
    assert np.array_equal(a.second_matrix(), b.second_matrix())

    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=400), refit_every=10**9,
                             min_split_weight=50.0, max_depth=2)
    eng.learn(first)
    eng.refit()
    assert eng.model_.n_leaves > 1 and eng.n_features_ == 64
    probe = _events(rng, 300, 40)
    before = eng.assign(probe)
    eng.learn(_events(rng, 50, 200, start=40))  # new tokens: the state widens
    assert eng.n_features_ >= len(eng.vocabulary) > 64
    after = eng.assign(probe)
    np.testing.assert_array_equal(before.leaf_ids, after.leaf_ids)
    np.testing.assert_array_equal(before.margins, after.margins)


def test_a_grown_state_survives_a_snapshot_and_keeps_growing() -> None:
    rng = np.random.default_rng(2)
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=1000), refit_every=2000,
                             min_split_weight=50.0)
    eng.learn(_events(rng, 3000, 90))
    restored = StreamingHierarchy.restore(eng.snapshot())
    assert restored.n_features_ == eng.n_features_ == 128
    assert restored.snapshot() == eng.snapshot()
    more = _events(rng, 500, 300, start=90)
    eng.learn(more)
    restored.learn(more)
    assert restored.n_features_ == eng.n_features_ == 390
    assert restored.snapshot() == eng.snapshot()


def test_matrix_input_of_either_width_is_accepted() -> None:
    rng = np.random.default_rng(3)
    vocab = Vocabulary(capacity=500)
    eng = StreamingHierarchy(vocabulary=vocab, refit_every=10**9)
    wide = vocab.transform(_events(rng, 100, 30))
    assert wide.shape[1] == 500
    eng.learn(wide)
    narrow = wide[:, : eng.n_features_]
    np.testing.assert_array_equal(eng.assign(narrow).leaf_ids, eng.assign(wide).leaf_ids)


def test_internal_nodes_hold_their_frozen_sums_sparse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #14: an internal node's packed C (its part from before the split) is held as its
    non-zero entries; the sums it stands for are unchanged (full C = offset + children).
    Packed sums from the first row (no row-held phase) to reach this path."""
    from streammom import rowgram
    from streammom.packed import SparsePacked, packed_archive, widen_packed

    monkeypatch.setattr(rowgram, "ROWS_PER_PACKED_ENTRY", 0.0)
    rng = np.random.default_rng(4)
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=400), refit_every=1_000,
                             min_split_weight=50.0, max_depth=2)
    eng.learn(_events(rng, 4000, 120))
    internal = [v for v in eng.nodes_.values() if v.children]
    assert internal and all(isinstance(v.acc.C, SparsePacked) for v in internal)
    assert all(isinstance(v.acc.C, np.ndarray) for v in eng.nodes_.values() if not v.children)
    root = eng.node_accumulator(eng.root_id_)
    assert root.weight == 4000 and np.isclose(root.second_matrix().trace(), root.s.sum())
    restored = StreamingHierarchy.restore(eng.snapshot())
    assert all(isinstance(restored.nodes_[v.node_id].acc.C, SparsePacked) for v in internal)
    # the same archive bytes and the same widening, held sparse or dense
    offset = internal[0].acc.C
    d = eng.n_features_
    dense = offset.to_dense()
    assert {k: v.tobytes() for k, v in packed_archive(offset).items()} == {
        k: v.tobytes() for k, v in packed_archive(dense).items()}
    np.testing.assert_array_equal(offset.widen(d, d + 37).to_dense(),
                                  widen_packed(dense, d, d + 37))
