"""Row-held second-order sums (issue #14, item 1: the cheapest exact representation for the
data): a RowGram is the same C as the packed sums under every operation the engine applies,
the engine keeps wide data as rows (no d² allocation), its row-held splits are exact, and the
state replays byte for byte through snapshots."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from streammom import StreamingHierarchy, rowgram
from streammom.moments import MomentAccumulator
from streammom.packed import packed_size, unpack_symmetric
from streammom.rowgram import RowGram, rows_limit


def _counts(n: int, d: int, nnz: int, seed: int) -> sp.csr_array:
    """Rows of ``nnz`` distinct columns with counts 1–3 (sorted indices)."""
    rng = np.random.default_rng(seed)
    cols = np.sort(np.argsort(rng.random((n, d)), axis=1)[:, :nnz], axis=1)
    data = rng.integers(1, 4, size=(n, nnz)).astype(np.float64)
    return sp.csr_array((data.ravel(), cols.ravel().astype(np.int32),
                         np.arange(0, n * nnz + 1, nnz)), shape=(n, d))


def _gram(X: sp.csr_array, w: np.ndarray) -> np.ndarray:
    Xd = X.toarray()
    return Xd.T @ (w[:, None] * Xd)


def test_rowgram_is_the_same_matrix_under_every_operation() -> None:
    d = 40
    X = _counts(60, d, 7, seed=0)
    w = np.random.default_rng(1).uniform(0.5, 2.0, 60)
    R = RowGram(d)
    R.append(X, w, 0, 25)
    R.append(X, w, 25, 60)
    expected = _gram(X, w)
    np.testing.assert_allclose(unpack_symmetric(R.to_dense(), d), expected, rtol=1e-12)
    V = np.random.default_rng(2).standard_normal((d, 3))
    np.testing.assert_allclose(R.matmul(V), expected @ V, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(R.matmul(V[:, 0]), expected @ V[:, 0], rtol=1e-10, atol=1e-10)
    # decay, widening, removed features, a copy that does not share later changes
    snapshot = R.copy()
    R *= 0.5
    np.testing.assert_allclose(unpack_symmetric(snapshot.to_dense(), d), expected, rtol=1e-12)
    wide = R.widen(d, d + 5)
    big = np.zeros((d + 5, d + 5))
    big[:d, :d] = 0.5 * expected
    np.testing.assert_allclose(unpack_symmetric(wide.to_dense(), d + 5), big, rtol=1e-12)
    R.zero_lines(np.array([3, 17]), d)
    cut = 0.5 * expected
    cut[[3, 17], :] = 0.0
    cut[:, [3, 17]] = 0.0
    np.testing.assert_allclose(unpack_symmetric(R.to_dense(), d), cut, rtol=1e-12, atol=1e-12)
    # signed sums into a packed array
    out = snapshot.to_dense()
    snapshot.add_to(out, -1.0)
    assert np.abs(out).max() < 1e-9
    # one block in the same order, whatever the batches
    one = RowGram(d)
    one.append(X, w, 0, 60)
    snapshot.compact()
    for a, b in zip(snapshot.blocks[0], one.blocks[0], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("family", ["bernoulli", "multinomial"])
def test_row_held_accumulator_equals_the_packed_one(family: str) -> None:
    d = 400
    X = _counts(80, d, 5, seed=3)
    if family == "bernoulli":
        X.data[:] = 1.0
    packed = MomentAccumulator(d, family=family)
    rows = MomentAccumulator(d, family=family)
    rows.C = RowGram(d)
    for acc in (packed, rows):
        acc.update(X[:50])
        other = MomentAccumulator(d, family=family)
        if acc is rows:
            other.C = RowGram(d)
        other.update(X[50:])
        acc.merge(other)
        acc.decay(0.25)
    assert isinstance(rows.C, RowGram)
    # integer data, power-of-two decay: every entry is exact, so equal to the bit
    np.testing.assert_array_equal(rows.second_matrix(), packed.second_matrix())
    np.testing.assert_array_equal(rows.s, packed.s)
    assert (rows.weight, rows.t1, rows.t2, rows.t3) == (packed.weight, packed.t1, packed.t2,
                                                         packed.t3)


def test_rows_become_packed_past_the_limit() -> None:
    d = 20
    X = _counts(200, d, 6, seed=4)
    acc = MomentAccumulator(d)
    acc.C = RowGram(d)
    limit = rows_limit(d)
    per_row = 6
    under = limit // per_row
    acc.update(X[:under])
    assert isinstance(acc.C, RowGram) and acc.C.nnz <= limit
    acc.update(X[under:])
    assert isinstance(acc.C, np.ndarray) and acc.C.shape == (packed_size(d),)
    np.testing.assert_array_equal(acc.second_matrix(), _gram(X, np.ones(200)))


def test_row_held_archive_round_trip_and_hostile_archives() -> None:
    d = 25
    X = _counts(30, d, 4, seed=5)
    R = RowGram(d)
    R.append(X, np.linspace(1.0, 2.0, 30), 0, 30)
    arrays = R.archive()
    back = RowGram.from_archive(arrays, d)
    np.testing.assert_array_equal(back.to_dense(), R.to_dense())
    assert RowGram.from_archive(RowGram(d).archive(), d).nnz == 0

    def broken(**change: np.ndarray) -> dict[str, np.ndarray]:
        return {**arrays, **{f"C_rows_{k}": v for k, v in change.items()}}

    bad_index = arrays["C_rows_indices"].copy()
    bad_index[0] = d + 3
    unsorted = arrays["C_rows_indices"].copy()
    unsorted[:2] = unsorted[1::-1]
    nan = arrays["C_rows_w"].copy()
    nan[3] = np.nan
    for hostile in (broken(indices=bad_index), broken(indices=unsorted), broken(w=nan),
                    broken(w=arrays["C_rows_w"][:-1]), broken(data=arrays["C_rows_data"][1:]),
                    broken(indptr=arrays["C_rows_indptr"][::-1].copy())):
        with pytest.raises(ValueError):
            RowGram.from_archive(hostile, d)


def test_wide_rows_stay_rows_and_no_d_squared_state_is_allocated() -> None:
    """d = 20,000: one packed C would be 1.6 GB; the engine grows its tree on the rows."""
    d = 20_000
    X = _counts(600, d, 150, seed=6)
    tracemalloc.start()
    try:
        eng = StreamingHierarchy(d, family="multinomial", max_leaves=4, random_state=0)
        eng.partial_fit(X)
        eng.refit()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert eng.model_.n_leaves >= 2
    assert all(isinstance(v.acc.C, RowGram) for v in eng.nodes_.values())
    assert peak < 300e6, f"peak {peak / 1e6:.0f} MB: something of size d² was allocated"
    root = eng.node_accumulator(eng.root_id_)
    assert isinstance(root.C, RowGram) and root.C.n_rows == 600


def test_a_row_held_split_gives_the_children_their_exact_sums() -> None:
    """Without EM the model routes as the split did: each leaf's W and s are exactly the
    sums of the events the model sends there (not reservoir estimates)."""
    d = 3_000
    rng = np.random.default_rng(7)
    halves = [_counts(400, d // 2, 40, seed=8), _counts(400, d // 2, 40, seed=9)]
    X = sp.csr_array(sp.block_diag(halves, format="csr"))
    X = X[rng.permutation(X.shape[0])]
    X.sort_indices()
    eng = StreamingHierarchy(d, family="multinomial", em=False, max_leaves=2,
                             reservoir_size=64, first_refit=None, refit_every=10**9,
                             random_state=0)
    eng.partial_fit(X)
    eng.refit()
    assert eng.model_.n_leaves == 2
    leaves = eng.assign(X).leaf_ids
    for v in eng.nodes_.values():
        if v.children:
            assert isinstance(v.acc.C, RowGram) and v.acc.C.nnz == 0  # nothing left over
            continue
        mine = leaves == v.node_id
        assert v.acc.weight == mine.sum()
        np.testing.assert_array_equal(v.acc.s, X[mine].sum(axis=0))
        C = v.acc.C
        assert isinstance(C, RowGram) and C.n_rows == mine.sum()
        np.testing.assert_array_equal(unpack_symmetric(C.to_dense(), d),
                                      _gram(X[mine], np.ones(int(mine.sum()))))


def test_row_held_engine_replays_byte_for_byte_through_snapshots() -> None:
    d = 2_500
    X = _counts(3_000, d, 30, seed=10)
    cfg = {"family": "multinomial", "max_leaves": 6, "random_state": 3}
    batch = 500

    def run(restore_at: int | None) -> bytes:
        eng = StreamingHierarchy(d, **cfg)
        for i, s in enumerate(range(0, X.shape[0], batch)):
            if i == restore_at:
                eng = StreamingHierarchy.restore(eng.snapshot())
            eng.partial_fit(X[s:s + batch])
        return eng.snapshot()

    reference = run(None)
    eng = StreamingHierarchy.restore(reference)
    assert eng.model_.n_leaves >= 2 and eng.n_refits_ >= 2
    assert all(isinstance(v.acc.C, RowGram) for v in eng.nodes_.values())
    for boundary in (1, 3, 5):
        assert run(boundary) == reference, f"restore at batch {boundary} diverged"


def test_packed_and_row_held_offsets_mix_in_one_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows that outgrow the limit become packed leaves under row-held parents (and the
    other way round): the full sums of the root stay exactly the sums of the stream."""
    monkeypatch.setattr(rowgram, "ROWS_PER_PACKED_ENTRY", 0.05)
    d = 300
    X = _counts(6_000, d, 6, seed=11)
    X.data[:] = 1.0
    eng = StreamingHierarchy(d, max_leaves=8, random_state=1)
    mixed = 0
    for s in range(0, X.shape[0], 200):
        eng.partial_fit(X[s:s + 200])
        kinds = {type(v.acc.C) for v in eng.nodes_.values()}
        if RowGram not in kinds or kinds == {RowGram}:
            continue
        mixed += 1
        root = eng.node_accumulator(eng.root_id_)
        seen = X[: s + 200]
        assert root.weight == seen.shape[0]
        np.testing.assert_allclose(root.second_matrix(), _gram(seen, np.ones(seen.shape[0])),
                                   rtol=1e-9, atol=1e-6)
    assert mixed >= 3


def test_an_engine_archive_of_schema_1_still_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints written before row-held sums (schema 1: packed C only) are read; an
    archive of a later schema is refused with a clear error."""
    from streammom.serialization import SnapshotFormatError

    X = _counts(2_000, 200, 5, seed=12)
    X.data[:] = 1.0
    monkeypatch.setattr(rowgram, "ROWS_PER_PACKED_ENTRY", 0.0)  # packed from the first row
    old = StreamingHierarchy(200, max_leaves=4, random_state=2)
    old.partial_fit(X[:1_500])
    monkeypatch.undo()
    manifest, arrays = old.to_archive()
    assert not any(k.endswith("C_rows_w") for k in arrays)
    restored = StreamingHierarchy.from_archive({**manifest, "schema_version": 1}, arrays)
    np.testing.assert_array_equal(restored.node_accumulator(0).second_matrix(),
                                  old.node_accumulator(0).second_matrix())
    restored.partial_fit(X[1_500:])  # new nodes start as rows beside the packed ones
    assert restored.node_accumulator(0).weight == 2_000
    with pytest.raises(SnapshotFormatError, match="schema"):
        StreamingHierarchy.from_archive({**manifest, "schema_version": 3}, arrays)
