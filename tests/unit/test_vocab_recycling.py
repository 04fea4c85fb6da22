"""A vocabulary that follows the stream (issue #14 item 2; docs/design.md §2 "vocabulary"):
Misra–Gries candidates, recycling of rare columns with their sums removed, code roll-up."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from streammom import CodeRollup, MomentAccumulator, StreamingHierarchy, Vocabulary
from streammom.packed import SparsePacked, pack_symmetric, unpack_symmetric, zero_packed_lines
from streammom.reservoir import Reservoir
from streammom.serialization import SnapshotFormatError


def junk_then_real(n_real: int = 3_000, seed: int = 0) -> tuple[list[list[str]], list[str]]:
    """The issue's scenario: ten events of 50 junk codes fill a 64-column vocabulary, then a
    stream of 30 real codes (two of them ``Z99.89`` and ``Q21.1``) with ~4 codes an event."""
    rng = np.random.default_rng(seed)
    junk = [[f"junk{i * 50 + j}" for j in range(50)] for i in range(10)]
    real = ["Z99.89", "Q21.1"] + [f"R{i:02d}" for i in range(28)]
    p = np.linspace(2.0, 1.0, len(real))
    p /= p.sum()
    events = [list(dict.fromkeys(rng.choice(real, size=4, p=p).tolist()))
              for _ in range(n_real)]
    return junk + events, real


# ---------------------------------------------------------------------- Misra–Gries candidates
def test_candidates_never_overestimate_and_keep_heavy_hitters():
    rng = np.random.default_rng(3)
    v = Vocabulary(capacity=4, candidates=8)
    v.transform([["a", "b", "c", "d"]])  # full
    stream = [[f"t{int(k)}"] for k in rng.zipf(1.3, 20_000) if k < 500]
    true = Counter(tok for e in stream for tok in e)
    for a in range(0, len(stream), 997):
        v.transform(stream[a:a + 997])
    cand = v.candidates
    assert len(cand) <= 8
    assert all(c <= true[t] for t, c in cand.items())  # Misra–Gries underestimates
    n = sum(true.values())
    heavy = {t for t, c in true.items() if c > n / 9}  # > N/(k+1): guaranteed a counter
    assert heavy and heavy <= set(cand)
    assert v.oov_count == n


def test_candidates_only_once_full_and_never_for_a_fixed_vocabulary():
    v = Vocabulary(capacity=8)
    v.transform([["a", "b"]] * 3)
    assert v.candidates == {} and not v.is_full
    fixed = Vocabulary(["a", "b"])
    fixed.transform([["a", "x"]] * 5)
    assert fixed.candidates == {} and fixed.oov_count == 5 and fixed.plan_recycling() == []


def test_plan_recycling_needs_a_margin_and_counts_are_inherited():
    v = Vocabulary(capacity=2)
    v.transform([["a", "b"]] * 3)  # a, b: 3 each
    v.transform([["c"]] * 6)
    assert v.plan_recycling() == []  # 6 is not > 2 × 3
    v.transform([["c"]])
    assert v.plan_recycling() == [(0, "c")]
    v.recycle(v.plan_recycling())
    assert v.tokens == ("c", "b") and v.counts[0] == 7.0 and v.recycled_count == 1
    assert "a" not in v and v.candidates == {}
    v.transform([["a"]] * 10)  # "a" must now beat the rarest column, b (3)
    assert v.plan_recycling() == [(1, "a")]


def test_decay_scales_counts_and_candidates():
    v = Vocabulary(capacity=1)
    v.transform([["a"]] * 4 + [["b"]] * 2)
    v.decay(0.5)
    assert v.counts[0] == 2.0 and v.candidates == {"b": 1.0}
    with pytest.raises(ValueError):
        v.decay(0.0)


def test_archive_round_trip_and_version_1_archives_load():
    v = Vocabulary(capacity=3, rollup=CodeRollup(prefix=3))
    v.transform([["250.01", "E11.65", "I10"], ["V45.81", "250.1"], ["V45.2"]])
    out = Vocabulary.from_archive(v.to_archive()[0])
    assert out.to_archive() == v.to_archive()
    assert out.tokens == ("250", "E11", "I10") and out.candidates == {"V45": 2.0}
    old = {"format": "streammom", "kind": "vocabulary", "schema_version": 1,
           "tokens": ["a", "b"], "capacity": 4, "growing": True, "oov_count": 2}
    v1 = Vocabulary.from_archive(old)
    assert v1.tokens == ("a", "b") and v1.counts[:2].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("change", [
    {"counts": [1.0]}, {"counts": [1.0, -1.0, 0.0]}, {"candidates": [["I10", 2.0]]},
    {"candidates": [["x", float("nan")]]}, {"candidate_slots": 0},
    {"rollup": {"prefix": 0, "mapping": []}}, {"schema_version": 9},
])
def test_hostile_vocabulary_archives_are_refused(change):
    v = Vocabulary(capacity=3)
    v.transform([["250", "E11", "I10"]])
    manifest = {**v.to_archive()[0], **change}
    with pytest.raises(SnapshotFormatError):
        Vocabulary.from_archive(manifest)


def test_merge_adds_counts_and_refuses_other_tokens():
    a, b = Vocabulary(capacity=2), Vocabulary(capacity=2)
    a.transform([["x", "y"], ["z"]])
    b.transform([["x", "y"], ["z"], ["z"]])
    a.merge(b)
    assert a.counts.tolist() == [2.0, 2.0] and a.candidates == {"z": 3.0} and a.oov_count == 3
    with pytest.raises(ValueError, match="different tokens"):
        a.merge(Vocabulary(["q", "r"], capacity=2, growing=True))


# ---------------------------------------------------------------------- removing columns exactly
def test_zero_packed_lines_dense_and_sparse_agree_with_the_matrix():
    rng = np.random.default_rng(0)
    A = rng.random((7, 7))
    A = A + A.T
    cols = np.array([1, 4])
    C = pack_symmetric(A)
    S = SparsePacked.from_dense(C)
    zero_packed_lines(C, cols, 7)
    zero_packed_lines(S, cols, 7)
    B = A.copy()
    B[cols] = 0.0
    B[:, cols] = 0.0
    assert np.array_equal(unpack_symmetric(C, 7), B)
    assert np.array_equal(S.to_dense(), C)


def _rows(rng: np.random.Generator, n: int, d: int, avoid: np.ndarray) -> sp.csr_array:
    X = (rng.random((n, d)) < 0.3).astype(float)
    X[:, avoid] = 0.0
    return sp.csr_array(X)


def test_remove_columns_is_exact_for_the_remaining_features():
    """W, s, C equal the sums of the data without the columns; T equals the sums in the new
    basis for events that never held a removed feature (design §2 "vocabulary")."""
    rng = np.random.default_rng(1)
    d, cols = 12, np.array([2, 7])
    P = np.linalg.qr(rng.standard_normal((d, 4)))[0]  # non-zero on the removed rows
    acc = MomentAccumulator(d, basis=P)
    X = _rows(rng, 200, d, cols)
    X_with = X.toarray()
    X_with[:5, cols] = 1.0  # five events hold the removed features
    acc.update(sp.csr_array(X_with[:5]))
    acc.update(X[5:])
    acc.remove_columns(cols)
    Q = acc.basis
    assert np.allclose(Q.T @ Q, np.eye(4)) and np.all(Q[cols] == 0.0)
    ref = MomentAccumulator(d, basis=Q)
    ref.update(X[5:])
    assert acc.weight == 200.0
    expect_s = X.toarray().sum(axis=0)
    assert np.array_equal(acc.s, expect_s)
    B = X.toarray()
    assert np.allclose(acc.second_matrix(), B.T @ B)
    # T: exact for the 195 events without the removed features; the five others differ
    ref5 = MomentAccumulator(d, basis=Q)
    ref5.update(sp.csr_array(np.where(np.isin(np.arange(d), cols), 0.0, X_with[:5])))
    err = np.abs(acc.T - ref.T - ref5.T).max()
    assert err < np.abs(ref.T).max() * 0.5  # bounded by the five events' share
    acc_clean = MomentAccumulator(d, basis=P)
    acc_clean.update(X)
    acc_clean.remove_columns(cols)
    ref_clean = MomentAccumulator(d, basis=acc_clean.basis)
    ref_clean.update(X)
    assert np.allclose(acc_clean.T, ref_clean.T, atol=1e-9)


def test_remove_columns_refuses_single_topic_sums():
    acc = MomentAccumulator(4, family="multinomial")
    with pytest.raises(ValueError, match="Bernoulli"):
        acc.remove_columns(np.array([1]))


def test_reservoir_drops_removed_columns_and_keeps_slots():
    res = Reservoir(8, 6)
    X = sp.csr_array(np.array([[1.0, 0, 1, 0, 1, 0], [0, 1, 1, 0, 0, 1], [0, 0, 1, 0, 0, 0]]))
    res.offer(X, np.ones(3), 0.0, np.random.default_rng(0))
    res.remove_columns(np.array([2, 5]))
    assert res.to_csr().toarray().tolist() == [[1.0, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0],
                                               [0, 0, 0, 0, 0, 0]]


# ---------------------------------------------------------------------- the engine
def test_junk_filled_vocabulary_recovers_the_real_codes():
    events, real = junk_then_real()
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=64), max_leaves=4)
    for a in range(0, len(events), 200):
        eng.learn(events[a:a + 200])
    vocab = eng.vocabulary
    assert set(real) <= set(vocab.tokens)  # Z99.89 and Q21.1 got columns
    assert vocab.recycled_count >= len(real)
    names = eng.model_.feature_names
    assert "Z99.89" in names and "Q21.1" in names
    assert eng.assign([["Z99.89", "Q21.1"]]).leaf_ids.size == 1
    X = vocab.transform([["Z99.89", "Q21.1"]])
    assert X.nnz == 2  # no longer assigned with zero features
    assert any(r["event"] == "recycle" for r in eng.lineage_)
    # the sums of every kept junk column are untouched, those of recycled ones are gone
    root = eng.node_accumulator(eng.root_id_)
    junk_cols = [i for i, t in enumerate(vocab.tokens) if t.startswith("junk")]
    assert all(root.s[c] == 1.0 for c in junk_cols)
    total = sum(root.s[vocab.index(t)] for t in real)
    real_occurrences = sum(len(e) for e in events[10:])
    assert 0 < total <= real_occurrences  # counted from their admission on


def test_recycling_is_deterministic_and_survives_a_restore():
    events, _ = junk_then_real(2_000, seed=5)

    def run(split: int | None) -> bytes:
        eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=48), max_leaves=4)
        for a in range(0, len(events), 250):
            if split is not None and a == split:
                eng = StreamingHierarchy.restore(eng.snapshot())
            eng.learn(events[a:a + 250])
        return eng.snapshot()

    assert run(None) == run(None) == run(1_000)


def test_code_rollup_in_the_engine_and_from_a_file(tmp_path: Path):
    f = tmp_path / "ccs.csv"
    f.write_text("# code,group\nE11.65,diabetes\nE10.9,diabetes\n\nI10\thypertension\n")
    rollup = CodeRollup.from_file(f, prefix=3)
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=16, rollup=rollup))
    eng.learn([["E11.65", "E10.9", "I10"], ["250.01", "250.02", "J45.909"]])
    assert eng.vocabulary.tokens == ("diabetes", "hypertension", "250", "J45")
    assert eng.assign([["E10.9"]]).leaf_ids.tolist() == [0]
    restored = StreamingHierarchy.restore(eng.snapshot())
    assert restored.vocabulary.rollup == rollup
    bad = tmp_path / "bad.csv"
    bad.write_text("E11.65,diabetes\nonly-one-field\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2"):
        CodeRollup.from_file(bad)
    with pytest.raises(ValueError):
        CodeRollup()


def test_daemon_settings_build_a_rolling_up_vocabulary(tmp_path: Path):
    from service.config import build_engine, load_settings

    settings = load_settings(overrides={"model": {"code_rollup_prefix": 3},
                                        "checkpoint": {"dir": str(tmp_path)}})
    eng = build_engine(settings.model)
    assert eng.vocabulary.capacity == 1024 and eng.vocabulary.rollup == CodeRollup(prefix=3)


def test_ingest_side_routing_rolls_codes_up_like_the_learner():
    """Ingest workers route with the published model and the same [model] roll-up
    (service.pipeline.model_assigner): a fine code lands on its group's column."""
    from service.pipeline import model_assigner

    rollup = CodeRollup(prefix=3)
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=16, rollup=rollup))
    eng.learn([["250.01", "I10"], ["E11.65", "I10.1"]])
    eng.refit()  # publishes a model that names the features
    vocab, route = model_assigner(eng.model_, rollup)
    X = vocab.transform([["250.02", "E11.9"]])
    assert X.nnz == 2 and route(X).leaf_ids.tolist() == eng.assign([["250.02", "E11.9"]]
                                                                   ).leaf_ids.tolist()
    bare, _ = model_assigner(eng.model_)
    assert bare.transform([["250.02", "E11.9"]]).nnz == 0


@pytest.mark.parametrize("bad, error", [("", ValueError), (3, TypeError)])
def test_a_full_vocabulary_still_refuses_bad_tokens(bad, error):
    v = Vocabulary(capacity=2)
    v.transform([["a", "b"]])
    with pytest.raises(error):
        v.transform([["a", "c"], ["d", bad]])
