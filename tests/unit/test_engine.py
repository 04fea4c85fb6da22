"""StreamingHierarchy: learn/assign/refit, batch agreement, snapshots, merge (design §5)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from sklearn.metrics import adjusted_rand_score

from streammom import HierarchicalMoM, StreamingHierarchy, Vocabulary
from streammom.datasets import make_block_topics, make_hierarchical_bernoulli
from streammom.model import HierarchyModel, Routing
from streammom.packed import dense, pack_symmetric
from streammom.serialization import SnapshotFormatError


def _feed(eng: StreamingHierarchy, X: sp.csr_array, batch: int, **kw: object) -> None:
    for s in range(0, X.shape[0], batch):
        eng.learn(X[s : s + batch], **{k: v[s : s + batch] for k, v in kw.items()})  # type: ignore[index]


@pytest.fixture(scope="module")
def small_stream() -> tuple[sp.csr_array, np.ndarray]:
    X, y, _ = make_hierarchical_bernoulli(24_000, 120, 4, codes_per_event=12, random_state=3)
    return X, y


# ---------------------------------------------------------------------- acceptance: batch
def test_stationary_stream_agrees_with_the_batch_fit() -> None:
    """Moment routers only (``em=False``): the streaming sums give the batch D-SIDIWO tree."""
    X, y, _ = make_hierarchical_bernoulli(200_000, 500, 8, codes_per_event=10, random_state=0)
    eng = StreamingHierarchy(500, max_depth=3, refit_every=10_000, random_state=0,
                             method="dsidiwo", em=False)
    _feed(eng, X, 10_000)
    eng.refit()
    stream = eng.predict(X)
    batch = HierarchicalMoM(max_depth=3, method="dsidiwo", family="bernoulli").fit(X)
    batch_pred = batch.predict(X)
    assert eng.model_.n_leaves == 8
    assert adjusted_rand_score(batch_pred, stream) >= 0.95
    ari_stream = adjusted_rand_score(y, stream)
    ari_batch = adjusted_rand_score(y, batch_pred)
    assert abs(ari_stream - ari_batch) <= 0.02, (ari_stream, ari_batch)


def test_refined_stream_at_defaults_matches_or_beats_the_batch_fit() -> None:
    """Defaults (likelihood refinement on): as good as the batch tree on the truth, one pass."""
    X, y, _ = make_hierarchical_bernoulli(100_000, 500, 8, codes_per_event=10, random_state=0)
    eng = StreamingHierarchy(500, max_leaves=8)
    _feed(eng, X, 1_000)
    stream = eng.predict(X)
    batch = HierarchicalMoM(max_depth=3, method="dsidiwo", family="bernoulli").fit(X)
    assert eng.model_.n_leaves == 8
    assert any(r["event"] == "refine" for r in eng.lineage_)
    assert adjusted_rand_score(y, stream) >= adjusted_rand_score(y, batch.predict(X)) - 0.02


# ---------------------------------------------------------------------- API
def test_learn_assign_predict_and_lineage(small_stream: tuple[sp.csr_array, np.ndarray]) -> None:
    X, y = small_stream
    eng = StreamingHierarchy(120, max_depth=2, refit_every=4_000, min_split_weight=500)
    assert isinstance(eng.model_, HierarchyModel) and eng.model_.n_leaves == 1
    r0 = eng.learn(X[:1000])
    assert isinstance(r0, Routing) and r0.model_version == 0
    assert np.all(r0.leaf_ids == 0)
    _feed(eng, X[1000:], 1000)
    assert eng.n_events_seen_ == X.shape[0]
    assert eng.model_version_ > 0 and eng.model_.version == eng.model_version_
    assert eng.model_.n_leaves == 4
    assert eng.last_refit_time_ is None  # no timestamps and no decay: no event-time clock
    assert eng.last_refit_duration_ >= 0.0
    assert adjusted_rand_score(y, eng.predict(X)) > 0.9

    timed = StreamingHierarchy(120, max_depth=2, refit_every=4_000, min_split_weight=500,
                               first_refit=None)  # fixed refit points: every 4,000 events
    ts = 1.7e9 + 60.0 * np.arange(X.shape[0])
    _feed(timed, X, 1000, timestamps=ts)
    last_refit = (X.shape[0] // 4000) * 4000 - 1  # the policy runs after each 1,000-batch
    assert timed.last_refit_time_ == ts[last_refit]

    routing = eng.assign(X[:5])
    assert routing.model_version == eng.model_version_
    recs = routing.records()
    assert len(recs) == 5
    for rec, leaf in zip(recs, eng.predict(X[:5]), strict=True):
        assert rec["leaf_id"] == leaf and rec["path"][0] == 0 and rec["path"][-1] == leaf
        assert len(rec["margins"]) == len(rec["path"]) - 1
    # Lineage: splits with fresh, monotone ids; versions never decrease.
    splits = [r for r in eng.lineage_ if r["event"] == "split"]
    assert splits[0]["node"] == 0 and len(splits) >= 3
    kids = [c for r in splits for c in r["children"]]
    assert kids == sorted(kids) and len(set(kids)) == len(kids)
    versions = [r["version"] for r in eng.lineage_]
    assert versions == sorted(versions)
    assert set(eng.model_.leaf_ids) <= set(kids)


def test_refit_by_hand_and_partial_fit(small_stream: tuple[sp.csr_array, np.ndarray]) -> None:
    X, _ = small_stream
    eng = StreamingHierarchy(120, max_depth=1, refit_every=None, min_split_weight=100)
    assert eng.partial_fit(X[:3000]) is eng
    assert eng.model_.n_leaves == 1 and eng.model_version_ == 0
    records = eng.refit()
    assert [r["event"] for r in records] == ["split", "refine"]
    assert records[0]["version"] == 1 == eng.model_version_
    assert eng.model_.n_leaves == 2
    assert eng.refit() == []  # nothing new: no change, no version bump
    assert eng.model_version_ == 1


def test_time_based_refit_policy_uses_event_time(
    small_stream: tuple[sp.csr_array, np.ndarray],
) -> None:
    X, _ = small_stream
    eng = StreamingHierarchy(120, max_depth=1, refit_every=None, refit_every_seconds=60.0,
                             min_split_weight=100)
    ts = 1_000.0 + np.arange(6000) * 0.01  # 60 s of event time
    _feed(eng, X[:6000], 1000, timestamps=ts)
    assert eng.model_version_ == 0
    eng.learn(X[6000:7000], timestamps=np.full(1000, 1_061.0))
    assert eng.model_version_ == 1 and eng.last_refit_time_ == 1_061.0


def test_vocabulary_events_and_snapshot() -> None:
    rng = np.random.default_rng(0)
    groups = [[f"A{i}" for i in range(10)], [f"B{i}" for i in range(10)]]
    events = [list(rng.choice(groups[i % 2], size=4, replace=False)) for i in range(3000)]
    vocab = Vocabulary(capacity=64)
    eng = StreamingHierarchy(vocabulary=vocab, max_depth=1, refit_every=1000,
                             min_split_weight=100)
    assert eng.n_features_ == 64
    for s in range(0, 3000, 500):
        eng.learn(events[s : s + 500])
    assert len(vocab) == 20 and eng.model_.n_leaves == 2
    pred = eng.predict([["A1", "A2", "A3"], ["B1", "B2", "B3"]])
    assert pred[0] != pred[1]
    assert eng.model_.feature_names[:2] == vocab.feature_names[:2]
    back = StreamingHierarchy.restore(eng.snapshot())
    assert back.vocabulary is not None and back.vocabulary.tokens == vocab.tokens
    np.testing.assert_array_equal(back.predict(events[:50]), eng.predict(events[:50]))


def test_multinomial_sidiwo_smoke() -> None:
    X, y = make_block_topics(3000, 100, random_state=1)
    eng = StreamingHierarchy(X.shape[1], max_depth=1, family="multinomial", method="sidiwo",
                             refit_every=1000, min_split_weight=100, basis_dim=6)
    _feed(eng, X, 500)
    assert eng.model_.n_leaves == 2
    root = eng.nodes_[0].acc
    assert root.t3 > 0 and root.t1 == pytest.approx(float(X.sum()))
    # Intended first split {1–4} | {5–8} (thesis §5.4.1): labels 0–3 vs 4–7.
    assert adjusted_rand_score(y >= 4, eng.predict(X)) > 0.8


def test_input_validation() -> None:
    with pytest.raises(ValueError, match="half_life_unit"):
        StreamingHierarchy(5, half_life=10, half_life_unit="hours")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="method"):
        StreamingHierarchy(5, method="em")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="basis_dim"):
        StreamingHierarchy(5, basis_dim=1)
    with pytest.raises(TypeError):
        StreamingHierarchy(5, random_state=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vocabulary"):
        StreamingHierarchy(5, Vocabulary(capacity=6))
    eng = StreamingHierarchy(half_life=5.0, half_life_unit="seconds")
    assert eng.model_ is None
    with pytest.raises(ValueError, match="timestamps"):
        eng.learn(np.ones((3, 4)))
    eng2 = StreamingHierarchy()
    eng2.learn(np.eye(4))
    assert eng2.n_features_ == 4 and eng2.model_.n_features == 4
    with pytest.raises(ValueError, match="features"):
        eng2.learn(np.ones((2, 5)))
    with pytest.raises(ValueError, match="weights"):
        eng2.learn(np.ones((2, 4)), weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="timestamps"):
        eng2.learn(np.ones((2, 4)), timestamps=[1.0])
    # A CSR whose indices exceed its shape (scipy builds it unchecked) never reaches the
    # compiled kernels: learn and assign reject it and nothing is added.
    bad = sp.csr_array((np.ones(2), np.array([1, 9]), np.array([0, 1, 2])), shape=(2, 4))
    seen = eng2.n_events_seen_
    with pytest.raises(ValueError, match="column indices"):
        eng2.learn(bad)
    with pytest.raises(ValueError, match="column indices"):
        eng2.assign(bad)
    assert eng2.n_events_seen_ == seen
    with pytest.raises(SnapshotFormatError):
        StreamingHierarchy.restore(b"not a zip")


def test_warm_eigensolver_and_low_rank_operator() -> None:
    """The refit's eigen-solve (block Krylov, warm start) and the operator handed to
    compute_split reproduce the top eigenpairs of M2."""
    from streammom.decompose import KnownSpectrumOperator, top_eigenpairs
    from streammom.eigen import block_krylov_top as _block_krylov_top

    rng = np.random.default_rng(0)
    d = 300
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    lam = np.concatenate([[10.0, 4.0, 2.0], rng.uniform(0.0, 1.0, d - 3)])
    A = (Q * lam) @ Q.T
    start = np.linalg.qr(Q[:, :8] + 0.05 * rng.standard_normal((d, 8)))[0]
    vals, vecs, converged = _block_krylov_top(lambda B: A @ B, start, k=2, tol=1e-10,
                                              max_iter=200)
    assert converged
    np.testing.assert_allclose(vals[:2], lam[:2], rtol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(vecs[:, :2] * Q[:, :2], axis=0)), 1.0, atol=1e-8)
    op = KnownSpectrumOperator(vals, vecs)
    op_vals, op_vecs = top_eigenpairs(op, 3)
    np.testing.assert_allclose(op_vals, vals[:3], rtol=1e-10)
    np.testing.assert_allclose(np.abs(np.sum(op_vecs * vecs[:, :3], axis=0)), 1.0, atol=1e-8)
    # The operator really has those top eigenpairs: Lanczos on it (as a plain operator) agrees.
    plain = spla.LinearOperator(op.shape, matvec=op.matvec, matmat=op.matmat, dtype=float)
    lz_vals, lz_vecs = top_eigenpairs(plain, 3)
    np.testing.assert_allclose(lz_vals, vals[:3], rtol=1e-8)
    np.testing.assert_allclose(np.abs(np.sum(lz_vecs * vecs[:, :3], axis=0)), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="decreasing"):
        KnownSpectrumOperator(vals[::-1], vecs[:, ::-1])
    # Out of iterations: the last iterate comes back, flagged as not converged.
    *_, converged = _block_krylov_top(lambda B: A @ B, start, k=2, tol=1e-14, max_iter=1)
    assert not converged


# ---------------------------------------------------------------------- snapshots
@pytest.mark.parametrize("half_life", [None, 250.0])
def test_snapshot_restore_continue_is_byte_identical(
    small_stream: tuple[sp.csr_array, np.ndarray], half_life: float | None
) -> None:
    X, _ = small_stream
    X = X[:20_000]
    cfg = {"max_depth": 2, "refit_every": 3000, "min_split_weight": 200.0,
           "half_life": half_life, "reservoir_size": 256, "random_state": 5}
    batch = 1500
    starts = list(range(0, X.shape[0], batch))

    def run(restore_at: int | None) -> bytes:
        eng = StreamingHierarchy(120, **cfg)
        for i, s in enumerate(starts):
            if restore_at is not None and i == restore_at:
                eng = StreamingHierarchy.restore(eng.snapshot())
            eng.learn(X[s : s + batch])
        return eng.snapshot()

    reference = run(None)
    assert reference == run(None)  # same input + config → same bytes
    for boundary in (1, 2, 5, 9, len(starts) - 1):
        assert run(boundary) == reference, f"restore at batch {boundary} diverged"
    eng = StreamingHierarchy.restore(reference)
    assert eng.model_version_ > 0 and eng.n_events_seen_ == X.shape[0]
    if half_life is not None:
        ref = eng._decay.time_ref
        assert ref is not None and ref > 0  # renormalised on the way
    assert eng.snapshot() == reference


def test_partial_fit_learns_what_learn_learns_without_labelling(
    small_stream: tuple[sp.csr_array, np.ndarray],
) -> None:
    """partial_fit skips the labels (the scored leaves' MAP) but leaves the same state: same
    sums, tree, refits and bytes as learn on the same batches."""
    X, _ = small_stream
    X = X[:12_000]
    cfg = {"max_depth": 2, "refit_every": 3000, "min_split_weight": 200.0,
           "reservoir_size": 256, "random_state": 3}
    learned, fitted = StreamingHierarchy(120, **cfg), StreamingHierarchy(120, **cfg)
    for s in range(0, X.shape[0], 1500):
        routing = learned.learn(X[s : s + 1500])
        assert fitted.partial_fit(X[s : s + 1500]) is fitted
    assert learned.model_.scored and routing.leaf_ids.shape == (1500,)  # labels were due
    assert fitted.n_refits_ == learned.n_refits_ > 1
    assert fitted.snapshot() == learned.snapshot()
    np.testing.assert_array_equal(fitted.predict(X), learned.predict(X))


def test_merge_of_two_workers_equals_one_engine(
    small_stream: tuple[sp.csr_array, np.ndarray],
) -> None:
    X, _ = small_stream
    eng = StreamingHierarchy(120, max_depth=2, refit_every=3000, min_split_weight=200.0)
    _feed(eng, X[:9000], 1000)
    assert eng.model_.n_leaves > 1
    eng.refit_every = None  # workers route with the same model version between refits
    snap = eng.snapshot()
    whole = StreamingHierarchy.restore(snap)
    worker_a = StreamingHierarchy.restore(snap)
    worker_b = worker_a.fork()
    half1, half2 = X[9000:15_000], X[15_000:]
    _feed(whole, X[9000:], 1000)
    _feed(worker_a, half1, 1000)
    _feed(worker_b, half2, 1000)
    assert worker_b.n_events_seen_ == half2.shape[0]
    worker_a.merge(worker_b)
    assert worker_a.n_events_seen_ == whole.n_events_seen_
    for nid in whole.nodes_:
        a, w = worker_a.node_accumulator(nid), whole.node_accumulator(nid)
        assert a.weight == pytest.approx(w.weight, rel=1e-12)
        for name in ("s", "C", "T"):
            np.testing.assert_allclose(getattr(a, name), getattr(w, name), rtol=1e-9,
                                       atol=1e-9)
        assert len(worker_a.nodes_[nid].reservoir) <= worker_a.reservoir_size
    np.testing.assert_array_equal(worker_a.predict(X), whole.predict(X))
    # Different model versions do not merge.
    moved = StreamingHierarchy.restore(snap)
    moved.refit_every = None
    moved.model_version_ += 1
    with pytest.raises(ValueError, match="model versions"):
        worker_a.merge(moved)


def test_internal_c_is_offset_plus_children(
    small_stream: tuple[sp.csr_array, np.ndarray],
) -> None:
    """design §3: C is added at leaves only; an internal node's C is offset + children."""
    X, _ = small_stream
    eng = StreamingHierarchy(120, max_depth=2, refit_every=None, min_split_weight=100.0)
    eng.learn(X[:4000])
    eng.refit()
    eng.learn(X[4000:8000])
    eng.refit()
    root_before = eng.node_accumulator(0)
    eng.learn(X[8000:12_000])
    root_after = eng.node_accumulator(0)
    dense = X[8000:12_000].toarray()
    inc = dense.T @ dense
    from streammom.packed import unpack_symmetric

    np.testing.assert_allclose(
        unpack_symmetric(root_after.C - root_before.C, 120), inc, rtol=1e-12, atol=1e-9
    )
    internal = [v for v in eng.nodes_.values() if not v.is_leaf]
    assert internal and all(v.acc.C is not None for v in internal)


@pytest.mark.parametrize("reservoir_size, seed", [(16, 5), (24, 0), (100, 0)])
def test_root_c_of_0_1_rows_is_exact_after_splits_from_reservoirs(
    reservoir_size: int, seed: int,
) -> None:
    """Children start from the parent's reservoir rows, each worth W/n; the parent keeps the
    offset C_full − Σ children's C. With 0/1 rows and no forgetting the assembled C must be
    the events' C to the bit (the scale-out test compares a learner's sums with one
    process's with ==). W/n is not a short binary fraction when the reservoir size is not a
    power of two, or — at 16 — when a node born from a full reservoir splits again before
    its own reservoir fills (seed 5: W = 42.5 over 11 rows); the rounding of those
    products left pairs of the assembled C a few ulps off."""
    X, _, _ = make_hierarchical_bernoulli(1500, 30, 4, codes_per_event=4.0, block_size=4,
                                          random_state=seed)
    eng = StreamingHierarchy(max_depth=2, max_leaves=4, min_split_weight=20.0,
                             reservoir_size=reservoir_size, refit_every=200, first_refit=100,
                             min_reservoir_split=8, random_state=seed)
    for start in range(0, 1500, 100):
        eng.learn(X[start:start + 100])
    assert sum(not v.is_leaf for v in eng.nodes_.values()) >= 2  # splits below the root too
    exact = pack_symmetric((X.T @ X).toarray())
    np.testing.assert_array_equal(dense(eng.node_accumulator(eng.root_id_).C), exact)


def test_warm_up_compiles_every_kernel_the_engine_uses() -> None:
    """After ``warm_up`` (the worker calls it at start-up), learning from raw events (the
    daemon's path: int64 CSR from the vocabulary), from int64 CSR input and with counts needs no
    further compilation: the first batch's latency is not the compiler's."""
    from streammom import _kernels, warm_up

    names = ["add_row_sums", "add_packed_gram", "route_rows", "reservoir_offer",
             "unpack_packed"]
    assert warm_up() >= 0.0
    before = {k: len(getattr(_kernels, k).signatures) for k in names}
    assert all(n >= 1 for n in before.values())
    rng = np.random.default_rng(3)
    codes = [[f"c{int(i)}" for i in rng.choice(60, 6, replace=False)] for _ in range(3000)]
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=100), refit_every=1000,
                             min_split_weight=50.0)
    for s in range(0, 3000, 500):
        eng.learn(codes[s : s + 500])
    X = sp.csr_array((rng.random((2000, 40)) < 0.2) * rng.integers(1, 4, size=(2000, 40)),
                     dtype=np.float64)
    X64 = sp.csr_array((X.data, X.indices.astype(np.int64), X.indptr.astype(np.int64)),
                       shape=X.shape)
    counts = StreamingHierarchy(40, family="multinomial", refit_every=500, min_split_weight=50.0)
    for s in range(0, 2000, 500):
        counts.learn(X64[s : s + 500])
    assert eng.model_.n_leaves >= 2 and counts.model_.n_leaves >= 2
    after = {k: len(getattr(_kernels, k).signatures) for k in names}
    assert after == before


def test_bernoulli_engine_refuses_counts() -> None:
    """Issue #15: every estimator enforces the binary data family='bernoulli' models (the
    engine accepted counts up to 47 silently)."""
    eng = StreamingHierarchy(n_features=4, family="bernoulli")
    with pytest.raises(ValueError, match="binary"):
        eng.learn(sp.csr_array(np.array([[0.0, 47.0, 1.0, 0.0]])))
    assert eng.n_events_seen_ == 0
    eng.learn(sp.csr_array(np.array([[0.0, 1.0, 1.0, 0.0]])))
    counts = StreamingHierarchy(n_features=4, family="multinomial")
    counts.learn(sp.csr_array(np.array([[0.0, 47.0, 1.0, 3.0]])))
    assert counts.n_events_seen_ == 1


def test_growth_schedule_refits_early_then_every_refit_every() -> None:
    """first_refit: the first refit after 1,000 events, then each time the stream has grown
    by half, until the interval reaches refit_every (a tree on short streams); None:
    refit_every from the start."""
    X, _, _ = make_hierarchical_bernoulli(20_000, 200, 4, random_state=3)
    points = {}
    for first in (1_000, None):
        eng = StreamingHierarchy(200, refit_every=5_000, first_refit=first)
        seen = []
        for start in range(0, X.shape[0], 500):
            before = eng.n_refits_
            eng.learn(X[start:start + 500])
            if eng.n_refits_ > before:
                seen.append(eng.n_events_seen_)
        points[first] = seen
    assert points[1_000] == [1_000, 2_000, 3_000, 4_500, 7_000, 10_500, 15_500]
    assert points[None] == [5_000, 10_000, 15_000, 20_000]

