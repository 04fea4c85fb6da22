"""The growth floor (``refit.RefitPass._grow_to_floor``): a stream too short for its leaf
budget still grows half of it, and labels at least that many clusters."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streammom import StreamingHierarchy
from streammom.datasets import make_hierarchical_bernoulli
from streammom.refit import RefitPass


def _fit(n: int, k: int, seed: int, **params: object) -> tuple[StreamingHierarchy, sp.csr_array]:
    X, _, _ = make_hierarchical_bernoulli(n, 500, k, random_state=seed)
    X = sp.csr_array(X)
    eng = StreamingHierarchy(500, max_leaves=k, **params)
    for start in range(0, n, 1_000):
        eng.partial_fit(X[start:start + 1_000])
    return eng, X


def _leaves(eng: StreamingHierarchy) -> list[int]:
    return [nid for nid, v in eng.nodes_.items() if v.is_leaf]


def _floor_splits(eng: StreamingHierarchy) -> int:
    return sum(1 for r in eng.lineage_ if r["event"] == "split" and r.get("growth_floor"))


@pytest.mark.parametrize(("n", "k", "seed"), [(60, 8, 0), (60, 8, 1), (100, 16, 0)])
def test_a_stream_too_short_for_its_budget_grows_and_labels_half_of_it(
        n: int, k: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    eng, X = _fit(n, k, seed)
    half = -(-k // 2)
    assert len(_leaves(eng)) >= half
    assert np.unique(eng.predict(X)).size >= half
    assert _floor_splits(eng) > 0  # the floor made the difference: without it, fewer leaves
    monkeypatch.setattr(RefitPass, "_grow_to_floor", lambda self, n_leaves: False)
    without, _ = _fit(n, k, seed)
    assert len(_leaves(without)) < half
    assert _floor_splits(without) == 0


def test_the_floor_stops_at_half_the_budget_and_says_why() -> None:
    eng, _ = _fit(60, 8, 0)
    assert len(_leaves(eng)) == 4  # grown to ⌈8/2⌉ by the floor, not to the budget of 8
    # each leaf says why it waits (rows or weight for a split), not a spent budget
    assert {eng.nodes_[nid].stop_reason for nid in _leaves(eng)} <= {
        "min_split_weight", "min_reservoir", "split_quality", "one_sided", "moments"}


def test_a_floor_split_is_provisional_the_next_refit_undoes_it_and_grows_again() -> None:
    X, _, _ = make_hierarchical_bernoulli(500, 500, 8, random_state=0)
    X = sp.csr_array(X)
    eng = StreamingHierarchy(500, max_leaves=8)
    eng.partial_fit(X[:60])
    marked = [nid for nid, v in eng.nodes_.items() if v.quality.get("growth_floor")]
    assert marked and all(not eng.nodes_[nid].is_leaf for nid in marked)
    assert eng.model_.nodes[marked[0]].quality["growth_floor"] == 1.0  # published, too
    eng.partial_fit(X[60:120])  # the next refit
    undone = [r for r in eng.lineage_ if r["event"] == "prune" and r.get("growth_floor")]
    assert sorted(r["node"] for r in undone) == sorted(marked)
    grown = [r for r in eng.lineage_ if r["event"] == "split" and r["n_events"] == 120]
    assert grown  # the undone node grew again, from its rows and sums at 120 events
    assert len(_leaves(eng)) >= 4
    assert eng.nodes_[eng.root_id_].acc.weight == 120  # undoing keeps every event


def test_the_floor_changes_no_router_but_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # the rest of the tree routes the stream as it would without the floor: same sums after
    X, _, _ = make_hierarchical_bernoulli(300, 500, 16, random_state=1)
    X = sp.csr_array(X)
    with_floor = StreamingHierarchy(500, max_leaves=16)
    with_floor.partial_fit(X[:100])
    monkeypatch.setattr(RefitPass, "_grow_to_floor", lambda self, n_leaves: False)
    without = StreamingHierarchy(500, max_leaves=16)
    without.partial_fit(X[:100])
    assert _floor_splits(with_floor) > 0
    floor = {nid for nid, v in with_floor.nodes_.items() if "growth_floor" in v.quality}
    normal = [nid for nid, v in without.nodes_.items() if not v.is_leaf]
    assert normal and not floor & set(normal)
    for nid in normal:
        assert with_floor.nodes_[nid].router.same_as(without.nodes_[nid].router)
    for eng in (with_floor, without):  # 40 more events, before the next refit (at 150)
        eng.partial_fit(X[100:140])
        assert eng.n_refits_ == 1
    for nid in normal:
        a, b = with_floor.nodes_[nid].acc, without.nodes_[nid].acc
        assert a.weight == b.weight and np.array_equal(a.first_moment(), b.first_moment())


def test_a_stream_long_enough_for_half_its_budget_is_grown_as_before() -> None:
    eng, _ = _fit(500, 8, 0)
    assert _floor_splits(eng) == 0
    assert len(_leaves(eng)) == 8


def test_the_floor_is_deterministic() -> None:
    a, X = _fit(60, 8, 2)
    b, _ = _fit(60, 8, 2)
    assert _floor_splits(a) > 0
    assert np.array_equal(a.predict(X), b.predict(X))
    assert [r for r in a.lineage_ if r["event"] == "split"] == \
        [r for r in b.lineage_ if r["event"] == "split"]


def test_a_restored_engine_undoes_the_floor_as_the_uninterrupted_one_does() -> None:
    X, _, _ = make_hierarchical_bernoulli(300, 500, 16, random_state=4)
    X = sp.csr_array(X)
    eng = StreamingHierarchy(500, max_leaves=16)
    eng.partial_fit(X[:100])
    assert _floor_splits(eng) > 0
    restored = StreamingHierarchy.from_archive(*eng.to_archive())
    assert {nid for nid, v in restored.nodes_.items() if "growth_floor" in v.quality} == \
        {nid for nid, v in eng.nodes_.items() if "growth_floor" in v.quality}
    for e in (eng, restored):
        e.partial_fit(X[100:300])
    assert [r for r in restored.lineage_ if r["event"] in ("split", "prune")] == \
        [r for r in eng.lineage_ if r["event"] in ("split", "prune")]
    assert np.array_equal(restored.predict(X), eng.predict(X))
    assert restored.snapshot() == eng.snapshot()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_few_dozen_events_still_label_half_the_budget(seed: int) -> None:
    # 24 events, 4 leaves asked: the floor splits the root from 8 rows, and the scores keep
    # both halves labelled even where the last EM on so few rows would merge them again
    # (split_merge.labelled_floor keeps the refilled fit then)
    X, _, _ = make_hierarchical_bernoulli(24, 300, 4, random_state=seed)
    X = sp.csr_array(X)
    eng = StreamingHierarchy(300, max_leaves=4, first_refit=16)
    eng.partial_fit(X)
    assert eng.n_refits_ == 1 and eng.model_.n_leaves == 2
    assert np.unique(eng.predict(X)).size >= 2


def test_the_daemon_exports_and_logs_the_provisional_splits(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from prometheus_client import CollectorRegistry

    from service.metrics import WorkerMetrics

    eng, _ = _fit(60, 8, 0)
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    provisional = eng.model_.provisional_splits()
    assert len(provisional) == _floor_splits(eng) > 0
    with caplog.at_level(logging.INFO, logger="streammom.worker"):
        metrics.observe_model(eng)
        metrics.observe_model(eng)  # unchanged: logged once
    assert registry.get_sample_value("streammom_tree_provisional_splits") == len(provisional)
    said = [r for r in caplog.records if "provisional splits" in r.getMessage()]
    assert len(said) == 1 and "4 of 8 leaves" in said[0].getMessage()
    grown, _ = _fit(500, 8, 0)  # long enough: nothing provisional, the gauge falls back to 0
    assert grown.model_.provisional_splits() == ()
    metrics.observe_model(grown)
    assert registry.get_sample_value("streammom_tree_provisional_splits") == 0.0
