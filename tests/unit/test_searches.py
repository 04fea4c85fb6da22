"""The refinement's searches on a sample of a refit's rows (streammom.searches, design §5)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score
from test_split_merge import _clusters

from streammom import refine, searches
from streammom.evidence import EvidenceCache, fit_evidence
from streammom.mixture import fit_from_partition, fit_mixture_em, map_assign
from streammom.refine import refine_routers
from streammom.searches import search_sample, searched_on_sample


def test_the_sample_keeps_every_reservoir_s_weight_within_the_row_bound() -> None:
    sizes = [1_024, 300, 1_024, 5]
    index, factor = search_sample(sizes, max_rows=1_000, random_state=3)
    ends = np.cumsum(sizes)
    block = np.searchsorted(ends, index, side="right")
    assert index.size <= 1_000 and np.all(np.diff(index) > 0)  # distinct, in stack order
    assert np.bincount(block, minlength=4).tolist() == [250, 250, 250, 5]
    # each kept row stands for size / m rows: every reservoir keeps its weight exactly
    assert np.allclose(np.bincount(block, weights=factor, minlength=4), sizes)
    again, _ = search_sample(sizes, max_rows=1_000, random_state=3)
    other, _ = search_sample(sizes, max_rows=1_000, random_state=4)
    assert np.array_equal(index, again) and not np.array_equal(index, other)
    whole, ones = search_sample(sizes, max_rows=10_000, random_state=3)
    assert np.array_equal(whole, np.arange(sum(sizes))) and np.all(ones == 1.0)


def test_a_search_on_a_sample_mends_a_partition_with_a_shared_cluster_and_a_merged_pair(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four clusters; the start's components 0 and 1 share cluster 0 and component 2 holds
    clusters 1 and 2. The searches see half the rows (each leaf's reservoir thinned), and the
    shrunk EM on all of them from what they found labels the clusters; its partition is more
    evident than the start's. From the truth's partition nothing is found (None)."""
    X, y = _clusters(200, 60, 4, seed=0)
    wrong = np.where(y == 0, np.arange(y.size) % 2, np.where(y == 3, 3, 2))
    order = np.argsort(wrong, kind="stable")  # the rows stacked leaf by leaf, as a refit's
    X, y, wrong = X[order], y[order], wrong[order]
    sizes = np.bincount(wrong).tolist()
    w = np.ones(y.size)
    start = fit_mixture_em(X, *_means_weights(X, w, wrong), family="bernoulli", max_iter=50,
                           shrink=True)
    assert adjusted_rand_score(y, map_assign(X, start.means, start.weights, "bernoulli")) < 0.7
    seen: list[int] = []
    real = searches.search
    monkeypatch.setattr(searches, "search",
                        lambda rows, *a, **k: seen.append(rows.shape[0]) or real(rows, *a, **k))
    kw = {"max_rows": y.size // 2, "tol": 1e-6, "max_iter": 50, "passes": 50,
          "random_state": 0, "anneal": refine.MOVE_BETAS}
    found = searched_on_sample(X, w, sizes, start, "bernoulli", EvidenceCache(X, w), **kw)
    assert seen == [y.size // 2]
    assert found is not None
    labels = map_assign(X, found.means, found.weights, "bernoulli")
    assert adjusted_rand_score(y, labels) > 0.95
    assert fit_evidence(X, w, found) > fit_evidence(X, w, start)
    truth = fit_mixture_em(X, *_means_weights(X, w, y), family="bernoulli", max_iter=50,
                           shrink=True)
    assert searched_on_sample(X, w, np.bincount(y).tolist(), truth, "bernoulli",
                              EvidenceCache(X, w), **kw) is None


def _means_weights(X: sp.csr_array, w: np.ndarray, label: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    fit = fit_from_partition(X, w, label, int(label.max()) + 1, family="bernoulli", max_iter=0,
                             tol=1e-6)
    return fit.means, fit.weights


def test_a_moved_refit_past_the_searches_bound_searches_a_sample_of_its_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """refine_routers runs the searches on all the rows within the bound; past it, on a
    sample of PAIR_WORK / leaves rows when the stream moved (the stream's sample given), on
    none when it did not or with the ablation off; deterministic."""
    from test_refine import _scrambled

    eng, _, _ = _scrambled(seed=7)
    calls: list[tuple[str, int]] = []
    real_search, real_sampled = refine.search, refine.searched_on_sample
    monkeypatch.setattr(refine, "search", lambda rows, *a, **k: calls.append(
        ("all", rows.shape[0])) or real_search(rows, *a, **k))
    monkeypatch.setattr(refine, "searched_on_sample", lambda rows, *a, **k: calls.append(
        ("sample", k["max_rows"])) or real_sampled(rows, *a, **k))
    within = refine_routers(eng.nodes_, eng.root_id_, "bernoulli", max_iter=20)
    (kind, n_rows), = calls
    assert kind == "all"
    assert within is not None and within.sample_search_work == 0  # within the refit's price
    calls.clear()
    monkeypatch.setattr(refine, "RESTART_WORK", 0)
    monkeypatch.setattr(refine, "PAIR_WORK", n_rows * 4 - 4)  # 4 leaves: just past the bound
    settled = refine_routers(eng.nodes_, eng.root_id_, "bernoulli", max_iter=20)  # not moved
    assert calls == []
    assert settled is not None and settled.sample_search_work == 0
    moved = eng.nodes_[eng.root_id_].reservoir.to_csr()
    first = refine_routers(eng.nodes_, eng.root_id_, "bernoulli", max_iter=20, sample=moved)
    second = refine_routers(eng.nodes_, eng.root_id_, "bernoulli", max_iter=20, sample=moved)
    assert calls == [("sample", n_rows - 1)] * 2
    assert first is not None and second is not None
    assert first.sample_search_work == second.sample_search_work == refine.PAIR_WORK
    assert all(first.routers[nid].same_as(second.routers[nid]) for nid in first.routers)
    calls.clear()
    monkeypatch.setattr(refine, "SAMPLE_SEARCH", False)
    off = refine_routers(eng.nodes_, eng.root_id_, "bernoulli", max_iter=20, sample=moved)
    assert calls == []
    assert off is not None and off.sample_search_work == 0


def test_a_refit_that_searched_a_sample_is_charged_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost model prices a refit without its searches on a sample: the engine adds their
    price (c_S per row × leaf, refit_budget.sample_search_cost_events) to the spend, and the
    moved credit counts each of its refits with one — for code sets only, where they run."""
    from test_refine import _scrambled

    from streammom.refit_budget import (
        MOVED_REFITS,
        moved_credit,
        refit_cost_events,
        sample_search_cost_events,
    )

    eng, X, _ = _scrambled(seed=7)
    eng.em = True
    monkeypatch.setattr(refine, "RESTART_WORK", 0)
    monkeypatch.setattr(refine, "PAIR_WORK", 64)  # every refit past the searches' bound
    monkeypatch.setattr(type(eng), "stream_moved", lambda self: True)
    eng.learn(X, refit=False)  # new weight: the refit recomputes and refines
    spent, cost = eng._refit_spent, eng._refit_cost(light=False)
    eng.refit()
    assert eng.model_ is not None and any(v.score is not None for v in eng.nodes_.values())
    assert eng._refit_spent == pytest.approx(spent + cost + sample_search_cost_events(64))
    monkeypatch.setattr(type(eng), "stream_moved", lambda self: False)
    eng.learn(X, refit=False)
    spent, cost = eng._refit_spent, eng._refit_cost(light=False)
    eng.refit()
    assert eng._refit_spent == pytest.approx(spent + cost)  # settled: no search, no charge
    assert moved_credit(8, 500, 64) == pytest.approx(
        MOVED_REFITS * (refit_cost_events(15, 500) + sample_search_cost_events(64)))
    assert refine.sample_search_work_of("multinomial") == 0
