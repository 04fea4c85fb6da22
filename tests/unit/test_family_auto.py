"""``family="auto"`` (issue #15, item 3): the estimators take the family from the data —
Bernoulli for binary rows, multinomial for counts — and fit exactly what the explicit family
fits; the stream fixes it at its first batch and keeps it through snapshots and merges."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import scipy.sparse as sp

from streammom import HierarchicalMoM, SpectralMixture, StreamingHierarchy, Vocabulary
from streammom.datasets import make_hierarchical_bernoulli
from streammom.estimators import resolve_family
from streammom.serialization import SnapshotFormatError


def _binary(n: int = 3_000, seed: int = 0) -> sp.csr_array:
    X, _, _ = make_hierarchical_bernoulli(n, 60, 4, codes_per_event=8.0, random_state=seed)
    return sp.csr_array(X)


def _counts(n: int = 3_000, seed: int = 0) -> sp.csr_array:
    """Word counts from 4 topics over 60 words, ~30 tokens a document."""
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(60, 0.2), size=4)
    rows = rng.multinomial(30, topics[rng.integers(0, 4, n)])
    return sp.csr_array(rows.astype(float))


def _stream(X: sp.csr_array, **kw: object) -> StreamingHierarchy:
    eng = StreamingHierarchy(X.shape[1], max_leaves=4, **kw)  # type: ignore[arg-type]
    for start in range(0, X.shape[0], 500):
        eng.partial_fit(X[start:start + 500])
    return eng


def test_resolve_family_reads_the_entries() -> None:
    assert resolve_family("auto", _binary(50)) == "bernoulli"
    assert resolve_family("auto", _counts(50)) == "multinomial"
    assert resolve_family("auto", sp.csr_array((3, 4))) == "bernoulli"  # nothing seen: 0/1
    assert resolve_family("multinomial", _binary(50)) == "multinomial"
    with pytest.raises(ValueError, match="family"):
        resolve_family("poisson", _binary(50))


@pytest.mark.parametrize(("data", "family"), [(_binary, "bernoulli"), (_counts, "multinomial")])
def test_stream_auto_fits_what_the_explicit_family_fits(data, family) -> None:
    X = data()
    auto, explicit = _stream(X), _stream(X, family=family)
    assert auto.family == "auto" and auto.family_ == family
    assert auto.model_.family == family
    assert auto.model_.n_leaves == explicit.model_.n_leaves > 1
    np.testing.assert_array_equal(auto.predict(X), explicit.predict(X))
    for nid, v in explicit.nodes_.items():
        np.testing.assert_array_equal(auto.nodes_[nid].acc.s, v.acc.s)


def test_stream_auto_refuses_counts_after_a_binary_start() -> None:
    eng = _stream(_binary(600))
    assert eng.family_ == "bernoulli"
    seen = eng.n_events_seen_
    with pytest.raises(ValueError, match="family='auto' took 'bernoulli'"):
        eng.learn(_counts(10))
    assert eng.n_events_seen_ == seen


def test_stream_auto_on_events_binarises_once_bernoulli() -> None:
    """With a vocabulary, the first batch's token lists decide; later repeats of a code are
    then one code (the rows are 0/1), never a refused batch."""
    sets = StreamingHierarchy(vocabulary=Vocabulary(capacity=16))
    sets.learn([["E11.9", "I10"], ["I10", "J45"]])
    assert sets.family_ == "bernoulli"
    sets.learn([["I10", "I10", "E11.9"]])
    assert sets.n_events_seen_ == 3
    np.testing.assert_array_equal(np.sort(sets.nodes_[0].acc.s[:3]), [1.0, 2.0, 3.0])
    words = StreamingHierarchy(vocabulary=Vocabulary(capacity=16))
    words.learn([["the", "cat", "the"], ["a", "dog"]])
    assert words.family_ == "multinomial"


def test_predict_before_learning_does_not_fix_the_family() -> None:
    eng = StreamingHierarchy(60)
    eng.predict(_counts(5))
    assert eng._family_pending
    eng.learn(_counts(5))
    assert eng.family_ == "multinomial" and not eng._family_pending


def test_snapshots_keep_the_family_taken() -> None:
    X = _counts(2_000)
    eng = _stream(X[:1_000])
    restored = StreamingHierarchy.restore(eng.snapshot())
    assert restored.family_ == "multinomial" and not restored._family_pending
    for start in (1_000, 1_500):
        eng.partial_fit(X[start:start + 500])
        restored.partial_fit(X[start:start + 500])
    assert restored.snapshot() == eng.snapshot()
    fresh = StreamingHierarchy.restore(StreamingHierarchy(60).snapshot())
    assert fresh._family_pending
    fresh.learn(X[:10])
    assert fresh.family_ == "multinomial"


@pytest.mark.parametrize(("data", "family"), [(_binary, "bernoulli"), (_counts, "multinomial")])
def test_empty_events_first_leave_the_family_to_the_first_entries(data, family) -> None:
    """A stream whose first batches are empty rows (events without a code) takes its family
    from the first batch with an entry, and keeps the empty events: the sums, the model and
    the labels are those of the stream with that family given."""
    X = sp.vstack([sp.csr_array((700, 60)), data(2_000)]).tocsr()
    auto, given = _stream(X), _stream(X, family=family)
    assert auto.family_ == family and not auto._family_pending
    assert auto.n_events_seen_ == given.n_events_seen_ == 2_700
    root = auto.nodes_[auto.root_id_].acc
    assert root.weight == given.nodes_[given.root_id_].acc.weight == 2_700
    assert auto.model_ is not None and auto.model_.family == family
    assert auto.model_.n_leaves == given.model_.n_leaves > 1
    np.testing.assert_array_equal(auto.predict(X), given.predict(X))


def test_a_snapshot_before_the_family_keeps_its_empty_events() -> None:
    eng = _stream(sp.csr_array((700, 60)))
    assert eng._family_pending and eng.n_events_seen_ == 700
    restored = StreamingHierarchy.restore(eng.snapshot())
    assert restored._family_pending and restored.n_events_seen_ == 700
    X = _counts(1_000)
    for e in (eng, restored):
        e.partial_fit(X)
    assert restored.family_ == "multinomial" and restored.snapshot() == eng.snapshot()


def test_hostile_family_in_a_snapshot_is_refused() -> None:
    eng = _stream(_counts(600))
    manifest, arrays = eng.to_archive()
    for state_family, match in (("bernoulli", "family"), ("poisson", "family"),
                                (None, "not taken yet, but the sums hold entries")):
        bad = copy.deepcopy(manifest)
        bad["state"]["family"] = state_family
        with pytest.raises(SnapshotFormatError, match=match):
            StreamingHierarchy.from_archive(bad, arrays)


def test_engines_of_different_families_do_not_merge() -> None:
    a, b = StreamingHierarchy(60), StreamingHierarchy(60)
    a.learn(_binary(10))
    b.learn(_counts(10))
    with pytest.raises(ValueError, match="different families"):
        a.merge(b)


@pytest.mark.parametrize(("data", "family"), [(_binary, "bernoulli"), (_counts, "multinomial")])
def test_batch_estimators_auto(data, family) -> None:
    X = data(1_500)
    tree = HierarchicalMoM(max_depth=2, method="sidiwo").fit(X)
    same = HierarchicalMoM(max_depth=2, method="sidiwo", family=family).fit(X)
    assert tree.family_ == family and tree.model_.family == family
    np.testing.assert_array_equal(tree.labels_, same.labels_)
    flat = SpectralMixture(4).fit(X)
    assert flat.family_ == family
    np.testing.assert_array_equal(flat.means_, SpectralMixture(4, family=family).fit(X).means_)
