"""Split-and-merge moves of the refinement's mixture (streammom.split_merge, issue #15): one
component moved from a cluster that two components share to a component that holds two."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from engine_checks import acceptance_ari
from phenotype_streams import chapter_phenotypes, wide_phenotypes
from sklearn.metrics import adjusted_rand_score

from streammom import StreamingHierarchy
from streammom import split_merge as split_merge_module
from streammom.datasets import make_hierarchical_bernoulli
from streammom.evidence import fit_evidence
from streammom.mixture import (
    MixtureEMResult,
    WeightedRows,
    fit_from_partition,
    fit_mixture_em,
    log_likelihood_matrix,
    map_assign,
)
from streammom.refine import MOVE_BETAS
from streammom.split_merge import (
    CHECK_MARGIN,
    EVIDENCE_MARGIN,
    MOVE_TRIALS,
    MoveCache,
    split_merge,
)


def _clusters(n_per: int, d: int, k: int, seed: int) -> tuple[sp.csr_array, np.ndarray]:
    """k product-Bernoulli clusters, each with its own block of d // k frequent codes."""
    rng = np.random.default_rng(seed)
    block = d // k
    y = np.repeat(np.arange(k), n_per)
    p = np.full((k, d), 0.02)
    for j in range(k):
        p[j, j * block:(j + 1) * block] = 0.5
    X = (rng.random((y.size, d)) < p[y]).astype(float)
    return sp.csr_array(X), y


def test_a_shared_cluster_gives_a_component_to_a_cluster_pair() -> None:
    """A fit where components 0 and 1 split cluster 0 between them and component 2 holds
    clusters 1 and 2: one move merges 0 and 1 and splits 2, the fit is more likely and its MAP
    labels are the clusters; a fit at the truth's partition is returned as it is."""
    X, y = _clusters(200, 60, 4, seed=0)
    w = np.ones(X.shape[0])
    wrong = np.where(y == 0, np.arange(y.size) % 2, np.where(y == 3, 3, 2))
    fit = fit_from_partition(X, w, wrong, 4, family="bernoulli", max_iter=100, tol=1e-6)
    assert adjusted_rand_score(y, map_assign(X, fit.means, fit.weights, "bernoulli")) < 0.7
    moved = split_merge(X, w, fit, "bernoulli", max_iter=50, tol=1e-6)
    assert moved is not fit and moved.log_likelihood > fit.log_likelihood
    labels = map_assign(X, moved.means, moved.weights, "bernoulli")
    assert adjusted_rand_score(y, labels) > 0.95
    right = fit_from_partition(X, w, y, 4, family="bernoulli", max_iter=100, tol=1e-6)
    assert split_merge(X, w, right, "bernoulli", max_iter=50, tol=1e-6) is right


def test_moves_repeat_until_no_move_gains() -> None:
    """Two structure errors at once (clusters 0 and 1 each across two components, clusters
    2 + 3 and 4 + 5 each in one): one move mends one of them, the call mends both, and a
    call on its own result returns it as it is."""
    X, y = _clusters(150, 72, 6, seed=2)
    w = np.ones(X.shape[0])
    half = np.arange(y.size) % 2
    wrong = np.select([y == 0, y == 1, y <= 3], [half, 2 + half, 4], 5)
    fit = fit_from_partition(X, w, wrong, 6, family="bernoulli", max_iter=100, tol=1e-6)

    def ari(f: MixtureEMResult) -> float:
        return adjusted_rand_score(y, map_assign(X, f.means, f.weights, "bernoulli"))

    one = split_merge(X, w, fit, "bernoulli", max_iter=50, tol=1e-6, max_moves=1)
    assert one is not fit and ari(fit) < ari(one) < 0.95
    moved = split_merge(X, w, fit, "bernoulli", max_iter=50, tol=1e-6)
    assert ari(moved) > 0.95 and moved.log_likelihood > one.log_likelihood
    assert split_merge(X, w, moved, "bernoulli", max_iter=50, tol=1e-6) is moved


def test_the_move_is_deterministic() -> None:
    X, y = _clusters(150, 48, 4, seed=1)
    w = np.ones(X.shape[0])
    wrong = np.where(y == 0, np.arange(y.size) % 2, np.where(y == 3, 3, 2))
    fit = fit_from_partition(X, w, wrong, 4, family="bernoulli", max_iter=100, tol=1e-6)
    a = split_merge(X, w, fit, "bernoulli", max_iter=30, tol=1e-6, random_state=3)
    b = split_merge(X, w, fit, "bernoulli", max_iter=30, tol=1e-6, random_state=3)
    assert np.array_equal(a.means, b.means) and np.array_equal(a.weights, b.weights)


def test_a_shared_move_cache_changes_no_result_and_saves_the_repeated_work() -> None:
    """Calls sharing one :class:`MoveCache` (a refit's rounds of moves) return exactly what
    calls of their own return: two structure errors mended over several moves, then a round
    of trials on the result, whose candidates the last move already computed — that round
    adds no split candidate to the cache. A cache made for other rows is refused."""
    X, y = _clusters(150, 72, 6, seed=2)
    w = np.ones(X.shape[0])
    half = np.arange(y.size) % 2
    wrong = np.select([y == 0, y == 1, y <= 3], [half, 2 + half, 4], 5)
    fit = fit_from_partition(X, w, wrong, 6, family="bernoulli", max_iter=100, tol=1e-6)
    cache = MoveCache(X, w)
    alone = split_merge(X, w, fit, "bernoulli", max_iter=50, tol=1e-6)
    shared = split_merge(X, w, fit, "bernoulli", max_iter=50, tol=1e-6, cache=cache)
    assert shared is not fit
    assert np.array_equal(alone.means, shared.means)
    assert np.array_equal(alone.weights, shared.weights)
    computed = len(cache.splits)
    assert computed > 6  # the candidates of more than one move

    def trials(c: MoveCache | None) -> MixtureEMResult:
        return split_merge(X, w, shared, "bernoulli", max_iter=50, tol=1e-6, trials=3,
                           anneal=MOVE_BETAS, evidence_check=True, cache=c)

    again = trials(cache)
    assert len(cache.splits) == computed
    fresh = trials(None)
    assert np.array_equal(again.means, fresh.means) and again is shared and fresh is shared
    assert cache.fit_evidence(shared) == fit_evidence(X, w, shared)
    with pytest.raises(ValueError, match="other rows"):
        split_merge(X[:600], w[:600], fit, "bernoulli", max_iter=50, tol=1e-6, cache=cache)


def test_the_stream_escapes_a_shared_cluster_on_a_16_leaf_code_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """8,000 events of 16 latent leaves at d = 800 (seed 11): EM from the stream's tree left
    two true clusters in one leaf and one across two (BENCHMARKS.md "Split and merge"); with
    the move in the refinement the stream labels at ≥ 0.9 × the oracle's ARI, without it
    below."""
    import streammom.refine as refine
    import streammom.searches as searches

    X, y, _, truth = make_hierarchical_bernoulli(8_000, 800, 16, codes_per_event=10.0,
                                                 random_state=11, return_truth=True)
    X = sp.csr_array(X)
    oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence, truth.leaf_weights,
                                               "bernoulli"))
    got = acceptance_ari(X, y, 16)
    for module in (refine, searches):
        monkeypatch.setattr(module, "split_merge", lambda rows, w, fit, *a, **k: fit)
    without = acceptance_ari(X, y, 16)
    # since the refinement's shrinkage the stream without the moves passes 0.9 × too (0.768
    # against 0.774 ARI, oracle 0.823): the moves still label better, by less
    assert got >= 0.9 * oracle and got > without, (got, without, oracle)


def test_moves_on_a_short_stream_s_scores_mend_two_clusters_in_one_leaf(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """500 events of 8 latent leaves at d = 500 (seed 0, the acceptance protocol's order 0):
    the refinement's scores held two sibling clusters in one leaf and one cluster across two
    (BENCHMARKS.md "Moves on a short stream's scores"). With the moves on the scores (annealed
    EM after each, the best candidates tried whatever their sign) the stream labels at
    ≥ 0.9 × the oracle's ARI; without them lower (below 0.9 × before the shrinkage)."""
    import streammom.refine as refine

    X, y, _, truth = make_hierarchical_bernoulli(500, 500, 8, codes_per_event=10.0,
                                                 random_state=0, return_truth=True)
    order = np.random.default_rng(0).permutation(500)
    X, y = sp.csr_array(X)[order], y[order]
    oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence, truth.leaf_weights,
                                               "bernoulli"))

    def stream() -> float:
        eng = StreamingHierarchy(500, max_leaves=8)
        eng.partial_fit(X)
        return adjusted_rand_score(y, eng.predict(X))

    got = stream()
    monkeypatch.setattr(refine, "is_short_stream", lambda *a, **k: False)
    without = stream()
    # without them 0.91 × the oracle since the refinement's shrinkage (0.817 against 0.876 ARI)
    assert got >= 0.9 * oracle and got > without + 0.03, (got, without, oracle)


def _short_stream(seed: int) -> tuple[sp.csr_array, np.ndarray, float]:
    """A 500-event code stream of 8 latent leaves at d = 500 (the acceptance protocol's
    synthetic stream, order 0) and its oracle's ARI."""
    X, y, _, truth = make_hierarchical_bernoulli(500, 500, 8, codes_per_event=10.0,
                                                 random_state=seed, return_truth=True)
    order = np.random.default_rng(0).permutation(500)
    X, y = sp.csr_array(X)[order], y[order]
    oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence, truth.leaf_weights,
                                               "bernoulli"))
    return X, y, oracle


@pytest.mark.parametrize("seed", [35])
def test_moves_by_the_evidence_mend_what_the_likelihood_cannot_tell_apart(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a 500-event stream the shrunk scores can hold two true clusters in one leaf and one
    across two, where EM from the true labels is no more likely than EM from the stream's but
    the truth's partition is the more evident (BENCHMARKS.md "Moves by the evidence"). With
    the moves by the evidence this stream labels at ≥ 0.9 × the oracle's ARI; without them
    (the ablation) below it (measured 0.952 against 0.863 ×). Of the 500-event streams of
    seeds 0–45 it is the one the moves change since the labels' term integrates the shares
    out under the prior fitted to the leaves (:mod:`streammom.shares_prior`); seeds 8 and
    27, which the moves mended at the ML shares, end at 0.866 and 0.813 × with or without
    them (BENCHMARKS.md "The labels' term of the evidence under a prior on the shares fitted
    to the leaves")."""
    import streammom.refine as refine

    X, y, oracle = _short_stream(seed)

    def stream() -> float:
        eng = StreamingHierarchy(500, max_leaves=8)
        eng.partial_fit(X)
        return adjusted_rand_score(y, eng.predict(X))

    got = stream()
    monkeypatch.setattr(refine, "EVIDENCE_MOVES", False)
    without = stream()
    assert got >= 0.9 * oracle > without, (got, without, oracle)


def test_a_move_by_the_evidence_needs_its_margin() -> None:
    """Two true clusters merged into one component and a third split across two, on 480 rows:
    the move by the evidence puts the partition back (its evidence passes the start's by more
    than the margin); with a margin above what any move gains the fit is left as it is; a
    negative margin is an error."""
    X, y = _clusters(80, 120, 6, seed=4)
    wrong = y.copy()
    wrong[wrong == 1] = 0  # clusters 0 and 1 in one component
    third = np.flatnonzero(y == 2)
    wrong[third[::2]] = 1  # cluster 2 across components 1 and 2
    w = np.ones(X.shape[0])
    start = fit_from_partition(X, w, wrong, 6, family="bernoulli", max_iter=50, tol=1e-6)
    start = fit_mixture_em(X, start.means, start.weights, family="bernoulli", max_iter=50,
                           shrink=True)
    before = adjusted_rand_score(y, map_assign(X, start.means, start.weights, "bernoulli"))
    moved = split_merge(X, w, start, "bernoulli", max_iter=50, tol=1e-6, trials=3,
                        evidence_margin=EVIDENCE_MARGIN)
    after = adjusted_rand_score(y, map_assign(X, moved.means, moved.weights, "bernoulli"))
    assert before < 0.85 and after > 0.95, (before, after)
    gain = fit_evidence(X, w, moved) - fit_evidence(X, w, start)
    assert gain > EVIDENCE_MARGIN
    held = split_merge(X, w, start, "bernoulli", max_iter=50, tol=1e-6, trials=3,
                       evidence_margin=gain + 1e6)
    assert held is start
    with pytest.raises(ValueError, match="evidence_margin"):
        split_merge(X, w, start, "bernoulli", max_iter=50, tol=1e-6, evidence_margin=-1.0)


def test_an_empty_component_s_slot_goes_to_a_leaf_holding_two_clusters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight clusters in four sibling pairs (each pair shares a block of codes). EM left
    component 7 with no row while component 6 holds clusters 6 and 7; the most confused
    pairs are siblings, so no merge candidate involves the empty slot. The removal move frees
    it and splits component 6 into it; without removal candidates the moves merge a sibling
    pair instead, a less likely fit that labels worse."""
    import streammom.split_merge as sm

    rng = np.random.default_rng(4)
    y = np.repeat(np.arange(8), 120)
    p = np.full((8, 96), 0.02)
    for j in range(8):
        p[j, (j // 2) * 24:(j // 2) * 24 + 12] = 0.35  # the pair's shared block
        p[j, (j // 2) * 24 + 12 + (j % 2) * 6:(j // 2) * 24 + 18 + (j % 2) * 6] = 0.6
    X = sp.csr_array((rng.random((y.size, 96)) < p[y]).astype(float))
    w = np.ones(y.size)
    start = fit_from_partition(X, w, np.minimum(y, 6), 7, family="bernoulli", max_iter=100,
                               tol=1e-6)
    far = np.full((1, X.shape[1]), 0.01)  # a component far from every row
    fit = fit_mixture_em(X, np.vstack([start.means, far]), np.append(start.weights, 1e-6),
                         family="bernoulli", max_iter=100, tol=1e-6)
    assert fit.weights[7] < 0.01  # EM does not fill the slot on its own
    losses = sm.removal_losses(log_likelihood_matrix(X, fit.means, fit.weights, "bernoulli"),
                               fit.weights, w)
    assert losses[7] < 10.0 < 100.0 < losses[:7].min()

    def ari(f: MixtureEMResult) -> float:
        return adjusted_rand_score(y, map_assign(X, f.means, f.weights, "bernoulli"))

    moved = split_merge(X, w, fit, "bernoulli", max_iter=50, tol=1e-6)
    assert moved.log_likelihood > fit.log_likelihood and ari(moved) > 0.95 > ari(fit)

    monkeypatch.setattr(sm, "removal_losses", lambda joint, weights, row_weight: np.full(
        weights.shape, np.inf))  # no removal candidates
    merged = split_merge(X, w, fit, "bernoulli", max_iter=50, tol=1e-6)
    assert merged.log_likelihood < moved.log_likelihood and ari(merged) < 0.95


def _wide_start() -> tuple[sp.csr_array, np.ndarray, np.ndarray, MixtureEMResult]:
    """(X, y, unit weights, start): 1,500 rows of :func:`phenotype_streams.wide_phenotypes`
    and EM (20 passes) from a wrong partition — phenotypes 0 and 1 in component 0, 6 % of the
    rows, from everywhere, in component 1."""
    X, y = wide_phenotypes(1_500, seed=0)
    w = np.ones(X.shape[0])
    wrong = y.copy()
    wrong[wrong == 1] = 0
    wrong[np.random.default_rng(0).random(y.size) < 0.06] = 1
    return X, y, w, fit_from_partition(X, w, wrong, 8, family="bernoulli", max_iter=20,
                                       tol=1e-4)


def test_a_move_the_local_estimates_refuse_is_found_by_the_full_em() -> None:
    """Wide vocabulary of rare codes: a fit with two phenotypes in one component and a
    component of stray rows from everywhere. No candidate's local estimate (three components'
    rows, net of optimism) gains, so the best-candidate moves leave the fit; the candidates
    tried by the annealed EM on all the rows find a move that raises the partition's evidence
    by more than the check's margin, and the ARI."""
    X, y, w, start = _wide_start()
    assert split_merge(X, w, start, "bernoulli", max_iter=20, tol=1e-4) is start
    moved = split_merge(X, w, start, "bernoulli", max_iter=20, tol=1e-4, trials=MOVE_TRIALS,
                        anneal=MOVE_BETAS, evidence_check=True)

    def ari(fit: MixtureEMResult) -> float:
        return adjusted_rand_score(y, map_assign(X, fit.means, fit.weights, "bernoulli"))

    assert ari(moved) > ari(start) + 0.05, (ari(start), ari(moved))
    assert fit_evidence(X, w, moved) > fit_evidence(X, w, start) + CHECK_MARGIN


def test_the_evidence_check_keeps_a_move_whatever_its_likelihood_net_of_optimism(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The move of the test above, with every fit but the start's made 10⁶ nats less likely
    net of its optimism: kept under the evidence check, which does not ask the likelihood;
    refused by the trials judged by the likelihood."""
    X, _, w, start = _wide_start()
    real = WeightedRows.corrected
    monkeypatch.setattr(WeightedRows, "corrected", lambda rows, fit: (
        real(rows, fit) - (0.0 if fit is start else 1e6)))
    kwargs = dict(max_iter=20, tol=1e-4, trials=MOVE_TRIALS, anneal=MOVE_BETAS)
    assert split_merge(X, w, start, "bernoulli", evidence_check=True, **kwargs) is not start
    assert split_merge(X, w, start, "bernoulli", **kwargs) is start


def test_the_evidence_check_refuses_a_move_whose_partition_loses_evidence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The move of the test above, with the evidence of every fit but the start's lowered
    by 1,000 nats: more likely net of its optimism, but not kept under the check; kept
    without it."""
    X, _, w, start = _wide_start()
    real = MoveCache.fit_evidence
    monkeypatch.setattr(MoveCache, "fit_evidence", lambda cache, fit: (
        real(cache, fit) - (0.0 if fit is start else 1_000.0)))
    kwargs = dict(max_iter=20, tol=1e-4, trials=MOVE_TRIALS, anneal=MOVE_BETAS)
    assert split_merge(X, w, start, "bernoulli", evidence_check=True, **kwargs) is start
    assert split_merge(X, w, start, "bernoulli", **kwargs) is not start


def test_moves_kept_by_the_evidence_are_ranked_by_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000 events of eight phenotypes over chapters of rare codes (d = 8,894): ranked by
    their local gain net of optimism (TIC), the candidates tried by the full EM miss the move
    that mends the stream — TIC charges a split for the thousands of rare codes neither half
    holds — and the stream labels at 0.80 × the oracle's ARI (measured; 0.74 × before the
    scores' last EM pulled the codes' prior strengths together); ranked by their local gain in
    evidence, the measure that keeps them, at 0.92 × (0.90 × before; BENCHMARKS.md "Moves
    ranked by the evidence that keeps them", "Prior strengths pulled toward a common one")."""
    X, y, prevalence = chapter_phenotypes(2_000, seed=1)
    oracle = adjusted_rand_score(y, map_assign(X, prevalence, np.full(8, 1 / 8), "bernoulli"))
    shipped = acceptance_ari(X, y, 8)
    monkeypatch.setattr(split_merge_module, "RANK_BY_EVIDENCE", False)
    by_tic = acceptance_ari(X, y, 8)
    assert shipped > 0.9 * oracle and by_tic < 0.85 * oracle, (shipped, by_tic, oracle)
