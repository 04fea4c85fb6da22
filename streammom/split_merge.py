"""Split-and-merge moves: a local search step for the refinement's mixture, three components
at a time (Ueda, Nakano, Ghahramani & Hinton, "SMEM algorithm for mixture models", Neural
Computation 12(9), 2000).

EM from the tree's partition can stop where one cluster holds two leaves and another leaf
holds two clusters: on the synthetic code streams of 16 leaves (BENCHMARKS.md "Split and
merge") the confusion matrix of the stream's labels showed exactly that — two true clusters
in one leaf, one true cluster across two sibling leaves — and EM cannot move out of it, since
emptying a leaf and filling it elsewhere passes through less likely fits. The pair re-splits
(:mod:`streammom.pair_resplit`) re-fit two components in place; this step moves one
component from where it is redundant to where it is missing:

1. **merge candidates**: the most confused pairs (a, b) of the fit
   (:func:`streammom.pair_resplit.confused_pairs`, SMEM's merge criterion, eq. 8); the loss
   of merging them is L₂(a, b) − L₁(a ∪ b), the two-component log-likelihood of their rows
   (EM from their current partition) against that of one component, their weighted mean;
2. **split candidates**: every other component c; the gain of splitting it is
   L₂(c) − L₁(c) on its rows, the two components from the sign of the rows' projection on
   the top eigenvector of their between-component covariance
   (:func:`streammom.pair_resplit.between_direction`: for a mixture of two product
   components it is rank one along their difference), then two-component EM;
3. **removal candidates**: every component e, with the exact loss of removing it, the
   others' shares renormalised (:func:`removal_losses`); a move then frees e's slot for one
   half of a split candidate c ≠ e. EM can leave a component with almost no rows (a leaf
   whose cluster the others took): its removal costs nearly nothing, but the SMEM merge
   criterion, posterior overlap, seldom ranks it among the most confused pairs. On a 30,000-
   event random-tree code stream of 16 leaves at d = 3,000 the refit at 8,000 events left two
   such components (shares 6e-4 and 1e-4) while two leaves held two clusters each; the two
   removal moves gained 1,012 and 842 nats on the refit's rows (BENCHMARKS.md "Removal
   moves, and EM in the light refits");
4. the move with the largest gain − loss, if positive: a becomes the merged component (a
   removal: a's slot is freed), c and b the two halves of c (c keeps the half that holds more
   of its rows), then EM on all the rows from there; the result is kept only if its weighted
   log-likelihood exceeds the current fit's (same rows, same weights), so the step never
   makes the fit less likely. Gains, losses and that test are net of each fit's optimism
   (:class:`streammom.mixture.WeightedRows`, TIC): on weighted rows a split of a
   heavy component's rows otherwise gains from their noise, times their weight (BENCHMARKS.md
   "Skewed cluster shares"); the removal losses are the raw likelihood's.

**Trials by the full EM** (:func:`split_merge`'s ``anneal`` and ``trials``; every searched
refit of :mod:`streammom.refine`): the EM after each move starts with the annealed restart's
tempered passes, and the :data:`MOVE_TRIALS` best candidates are tried in order of gain − loss
whatever its sign, the first whose result passes the test kept (SMEM's own order, Ueda et al. 2000
§3: the local gains rank candidates, the full EM decides). The local estimates see three
components' rows alone, not where the other components' rows go once EM runs on all of them:

* on the 500-event code streams no single move without the tempered passes ends more likely,
  nor does the best candidate alone with them (BENCHMARKS.md "Moves on a short stream's
  scores");
* on code sets over a wide vocabulary of rare codes (2,000-event phenotype streams on the
  ICD-10-CM hierarchy, d ≈ 9,000, ``bench/icd_phenotype_streams.py``) a leaf holding two
  clusters gains −66 nats by its local split even when split by the true labels: the second
  component's optimism (TIC) on the rare codes of 477 rows is larger than what its own rows
  gain. The move that frees a component there and splits that leaf gains 550–660 nats once
  EM runs on all the rows, and takes the stream from 0.76 to 0.91 × the oracle's ARI
  (BENCHMARKS.md "Moves tried by the full EM").

There (``evidence_check``) a move is kept when its result's partition passes the current one's
evidence (:func:`streammom.evidence.fit_evidence`, "By the evidence" below) by more than
:data:`CHECK_MARGIN` nats, whatever its likelihood:

* the likelihood alone is not enough, for a stronger search reaches the optima of maximum
  likelihood that label worse: on code streams with skewed cluster shares those split a large
  cluster and merge two small ones, and the trials kept by the likelihood took 8 of the 16
  skewed-share streams of ``bench/uncovered_shapes.py`` below 0.9 × the oracle's ARI;
* nor is the likelihood net of its optimism a second judge: it counts every code the rows hold
  as a parameter of every component, so on a wide vocabulary of rare codes it charges a split
  for thousands of codes neither half holds. On the 5,000-event ICD phenotype streams of 16
  phenotypes the moves that raised the ARI lost 3–98 nats by it and gained 82–191 of
  evidence; judged by the evidence alone those streams went from 0.78–0.89 to 0.91–0.94 ×
  the oracle's ARI, while the skewed-share streams passing 0.9 × fell from 13 to 11 of 16
  (BENCHMARKS.md "The moves tried by the full EM kept by the evidence").

**Ranked by the evidence** (:data:`RANK_BY_EVIDENCE`): the moves tried by the full EM and kept
by the evidence (``evidence_check``) rank their candidates by it too — a split candidate by
the evidence its two-component fit's MAP partition of the component's rows gains over the rows
together, a merge candidate by what the pair's partition holds over its rows together
(:func:`_two_parts`); a removal keeps its likelihood loss. Ranked net of optimism, the
:data:`MOVE_TRIALS` candidates tried were those TIC favours, which on a wide vocabulary of
rare codes charges a split for the rare codes neither half holds (above): on the 2,000-event
ICD phenotype streams a leaf held two phenotypes and another phenotype lay across two leaves,
the truth's partition was 250–970 nats more evident than the stream's, and the move that mends
it was not among those tried. Ranked by the evidence, 16 such streams went from a mean of
0.846 to 0.884 × the oracle's ARI (the worst from 0.50 to 0.72) and the 5,000-event streams of
16 phenotypes (12 seeds) from 0.866 to 0.897; the skewed-share streams passing 0.9 × went from
14 to 15 of 16, and the real sets' labels did not change. The moves by the evidence on a short
stream's scores keep their ranking net of optimism: ranked by the evidence, the 500-event
streams passing 0.9 × fell from 53 to 52 of 56 (BENCHMARKS.md "Moves ranked by the evidence
that keeps them").

**By the evidence** (``evidence_margin``; a short stream's shrunk scores,
:mod:`streammom.refine`): maximum likelihood prefers, on a few hundred events, partitions that
label worse than the truth's (two sibling clusters in one component, one cluster across two:
EM from those labels is as likely as EM from the true ones, or more), while the posterior
under the shrinkage's Beta prior prefers the truth's. There each move's EM is the shrunk one
and a move is kept when the evidence of its partition — the rows' marginal likelihood with
the rates integrated out under the type-II prior, plus the labels' own term
(:func:`streammom.shrinkage.partition_evidence`) — passes the current one's by more than
``evidence_margin`` nats. The refinement runs them with no margin, to the evidence's local
optimum, and keeps where they end only when its evidence passes their start's by more than
:data:`EVIDENCE_MARGIN`: the evidence of a hard partition is itself fitted to the rows (the
labels are chosen to raise it), so small gains are its noise. On the 500-event code streams of
56 seeds the moves that lowered the ARI gained 0.2–25.5 nats in all, those that raised it
32.7–53.3; with the margin the streams below 0.9 × the oracle's ARI fell from 7 to 2 and no
other stream changed (BENCHMARKS.md "Moves by the evidence").

**Half the components labelled** (:func:`labelled_floor`; the last step of a searched refit's
code-set scores, :mod:`streammom.refine`): the evidence of a hard partition charges
overlapping components the entropy of their labels (the ICL's bias toward fewer clusters),
and on a short stream of many weakly separated clusters the shrunk EM after the moves by the
evidence empties components the evidence does not miss. On ``bench/random_shapes.py``'s
stream of 1,500 events, d = 2,000, 16 leaves and 6 codes an event, 9 of the 16 were emptied:
7 labels, 0.729 × the oracle's ARI, where shrunk EM from the true labels keeps 16 at 0.917.
Issue #15 asks for never fewer than k/2 clusters, and a user who asks for ``max_leaves=k``
and whose tree grew them expects at least that many: while fewer than ⌈k/2⌉ components (or
``at_least``: the engine asks for half its leaf budget, which a tree short of the budget
may not reach by ⌈k/2⌉) hold a MAP row, an empty one takes one half of the split candidate
(2. above) of the component holding most rows, then pulled shrunk EM runs on all the rows;
where that EM empties the refilled components again (a stream of a few dozen events, on
which it merges the halves of the root), the refilled fit is kept as it is. That stream: 8
labels, 0.828.
Refilling every empty component instead labelled worse on the 300-event streams, where the
emptied components of 8 clusters of about 37 events label better than a refilled split
(mean 0.853 → 0.828 × the oracle's ARI); the floor leaves those streams as they were
(BENCHMARKS.md "Half the components labelled").

Moves repeat, each from the fit the last one left, until none gains or :data:`MAX_MOVES` have
been taken. A young stream's refits come on a geometric schedule, so a structure error left for
the next refit can outlive the stream: on the random-tree code streams of
``bench/random_tree_streams.py`` one refit of a 20-leaf tree took up to four moves, and with
one move a refit two streams of 40 ended below 0.9 × the oracle's ARI that reach it now
(BENCHMARKS.md "Split and merge until no move gains"). Each move costs at most k + 3 small
two-component fits (a split candidate per component, the merge candidates), the removal losses
(O(n · k)) and one EM over all the rows, so a refit's moves cost at most :data:`MAX_MOVES`
times that. The calls of one refit share a :class:`MoveCache`: a component whose rows a move
left where they were, and the next round's first move, which starts where the last round's
last move stopped, reuse their split and merge candidates and evidence (exactly: same rows,
same fits). Code sets (Bernoulli) only, like the pair re-splits, and within the same work bound
(:data:`streammom.refine.PAIR_WORK`). Deterministic: the Lanczos starts are seeded by
``random_state`` and the component.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from streammom.estimators import Family
from streammom.evidence import EvidenceCache, digest, fit_labels, labels_evidence
from streammom.mixture import (
    MixtureEMResult,
    WeightedRows,
    fit_from_partition,
    fit_mixture_em,
    log_likelihood_matrix,
    map_assign,
    normalise_joint,
)
from streammom.pair_resplit import MIN_PAIR_ROWS, between_direction, confused_pairs

__all__ = ["CHECK_MARGIN", "EVIDENCE_MARGIN", "MAX_MOVES", "MERGE_CANDIDATES", "MOVE_TRIALS",
           "MoveCache", "labelled_floor", "removal_losses", "split_merge"]

#: Merge candidates tried against every split candidate: the most confused pairs.
MERGE_CANDIDATES = 3
#: Moves a call takes at most (each must make the fit more likely; the random-tree code
#: streams never took more than four in one refit).
MAX_MOVES = 8
#: Candidate moves tried by the full EM, best first, whatever their local gain
#: (:func:`split_merge`'s ``trials``; module docstring): 8 and 24 found the same fits on the
#: 500-event code streams.
MOVE_TRIALS = 3
#: Nats of partition evidence by which the end of the moves by the evidence must pass their
#: start to be kept (module docstring, "By the evidence"): on the 500-event code streams (56
#: seeds) the moves that lowered the ARI gained up to 25.5 nats in all, those that raised it
#: 32–53.
EVIDENCE_MARGIN = 30.0
#: Nats of partition evidence by which the result of a move tried by the full EM must pass the
#: current fit's to be kept (:func:`split_merge`'s ``evidence_check``; module docstring, "Trials
#: by the full EM"). With :data:`EVIDENCE_MARGIN`'s 30, moves of +53 and +60 nats on 3,000- and
#: 5,000-row refits lowered the ARI (a random-tree stream from 0.99 to 0.93 × the oracle's);
#: on the ICD phenotype streams the moves that raised it gained 82–4,700 (BENCHMARKS.md "The
#: moves tried by the full EM kept by the evidence").
CHECK_MARGIN = 100.0
#: Whether the moves tried by the full EM and kept by the evidence (``evidence_check``) rank
#: their candidates by it too (module docstring, "Ranked by the evidence").
RANK_BY_EVIDENCE = True


@dataclass(eq=False)
class MoveCache(EvidenceCache):
    """What the moves computed on one refit's rows, for the moves after them on the same rows
    (:func:`split_merge`'s ``cache``): a component's split candidate, a pair's merge loss and a
    partition's evidence (:class:`streammom.evidence.EvidenceCache`) depend only on which rows
    they hold (and the EM's passes), and a move's EM leaves most components' rows where they
    were, so the next move — and the next round of moves, which starts where the last one
    stopped — finds most of them here. Keys are digests of the rows' indices; the values are
    exactly what recomputing gives, so a refit's result does not depend on the cache. Valid for
    the ``rows`` and ``row_weight`` it was made for."""

    splits: dict[tuple[int, int, bytes], tuple[float, MixtureEMResult, bool] | None] = field(
        default_factory=dict)
    merges: dict[tuple[int, int, int, bytes], tuple[float, np.ndarray, MixtureEMResult]] = (
        field(default_factory=dict))
    #: the same candidates' gains (splits) and losses (merges) in evidence (:func:`_two_parts`)
    split_evidence: dict[tuple[int, int, bytes], float] = field(default_factory=dict)
    merge_evidence: dict[tuple[int, int, int, bytes], float] = field(default_factory=dict)


def _one_component(rows: sp.csr_array, row_weight: np.ndarray, family: Family
                   ) -> MixtureEMResult:
    """The rows as one component: their weighted mean (Bernoulli) or normalised token counts
    (multinomial) and its log-likelihood (:func:`fit_from_partition` with no EM pass)."""
    return fit_from_partition(rows, row_weight, np.zeros(rows.shape[0], dtype=np.int64), 1,
                              family=family, max_iter=0, tol=0.0)


def removal_losses(joint: np.ndarray, weights: np.ndarray, row_weight: np.ndarray
                   ) -> np.ndarray:
    """The log-likelihood each component's removal costs, exactly, the others' shares
    renormalised: for component e,

        loss_e = Σ_i w_i [log p(x_i) − log p₋ₑ(x_i)],
        p₋ₑ(x) = Σ_{j≠e} π_j p(x | μ_j) / (1 − π_e),

    from the (n, k) joint log-likelihoods ``joint`` (log π_j + log p(x_i | μ_j)). Every
    leave-one-out log-sum-exp comes from the row's prefix and suffix log-sum-exps over the
    components, O(n · k) for all k (the last prefix is log p(x_i) itself). A component that
    holds no row costs about nothing to remove (its slot is free); one whose rows nothing
    else explains costs much.

    >>> means, shares = [[0.9, 0.1], [0.1, 0.9], [0.5, 0.5]], [0.5, 0.5 - 1e-9, 1e-9]
    >>> joint = log_likelihood_matrix(np.eye(2), means, shares, "bernoulli")
    >>> removal_losses(joint, np.array(shares), np.ones(2)).round(3).tolist()
    [3.033, 3.033, -0.0]
    """
    n, k = joint.shape
    pad = np.full((n, 1), -np.inf)
    running = np.logaddexp.accumulate(joint, axis=1)
    prefix = np.hstack([pad, running])[:, :k]
    suffix = np.hstack([np.logaddexp.accumulate(joint[:, ::-1], axis=1)[:, ::-1], pad])[:, 1:]
    without = np.logaddexp(prefix, suffix)  # (n, k): log Σ_{j≠e} π_j p(x_i | μ_j)
    total = running[:, -1]  # log p(x_i)
    with np.errstate(divide="ignore"):
        renormalise = np.log1p(-np.minimum(weights, 1.0))
    return row_weight @ (total[:, None] - without) + row_weight.sum() * renormalise


def split_merge(rows: sp.csr_array, row_weight: np.ndarray, fit: MixtureEMResult,
                family: Family, *, max_iter: int, tol: float, random_state: int = 0,
                max_moves: int = MAX_MOVES, anneal: Sequence[float] = (), trials: int = 0,
                evidence_margin: float | None = None, evidence_check: bool = False,
                cache: MoveCache | None = None) -> MixtureEMResult:
    """Split-and-merge moves on ``fit`` over the weighted ``rows`` until none gains, at most
    ``max_moves`` (module docstring): the more likely fit, or ``fit`` itself when no move
    gains. ``anneal``: tempered passes before the EM after each move
    (:func:`streammom.mixture.fit_mixture_em`). ``trials``: 0, the best candidate only and only
    when its gain − loss is positive; t > 0, the t best candidates whatever the sign, the
    first whose result passes the test. ``evidence_margin`` (code sets): the EM after each move
    is shrunk (:mod:`streammom.shrinkage`) and its result kept when its partition's evidence
    (:func:`streammom.evidence.fit_evidence`) passes the current fit's by more than this many
    nats (module docstring, "By the evidence"); None: by the likelihood net of its optimism.
    ``evidence_check`` (code sets; with ``evidence_margin`` None): a move is kept when its
    result's partition passes the current one's evidence by more than :data:`CHECK_MARGIN`
    nats, whatever its likelihood (module docstring, "Trials by the full EM"). ``cache``: a
    :class:`MoveCache` made for these ``rows`` and ``row_weight``, shared by the calls of one
    refit (None: one of this call's own); the result is the same."""
    if evidence_margin is not None and not evidence_margin >= 0:
        raise ValueError(f"evidence_margin must be >= 0, got {evidence_margin}")
    if cache is None:
        cache = MoveCache(rows, row_weight)
    elif cache.rows is not rows or cache.row_weight is not row_weight:
        raise ValueError("the move cache was made for other rows")
    for _ in range(max_moves):
        moved = _one_move(rows, row_weight, fit, family, max_iter=max_iter, tol=tol,
                          random_state=random_state, anneal=anneal, trials=trials,
                          evidence_margin=evidence_margin, evidence_check=evidence_check,
                          cache=cache)
        if moved is fit:
            break
        fit = moved
    return fit


def labelled_floor(rows: sp.csr_array, row_weight: np.ndarray, fit: MixtureEMResult,
                   family: Family, *, max_iter: int, tol: float, random_state: int,
                   at_least: int = 0) -> MixtureEMResult:
    """``fit`` with at least max(⌈k / 2⌉, ``at_least``) of its k components (k at most)
    holding a MAP row (module docstring, "Half the components labelled"): while fewer do, an
    empty component takes one half of the split candidate of the component holding most rows'
    weight (:func:`_split_candidate`), then pulled shrunk EM
    (:func:`streammom.mixture.fit_mixture_em` ``shrink="pulled"``) on all the rows, or the
    refilled fit itself (no EM step) when that EM labels fewer components than the refill
    did; ``fit`` itself when enough components are labelled or no component splits. Code sets
    (Bernoulli) only, like the pulled EM."""
    k, d = fit.means.shape
    label = fit_labels(rows, fit)
    target = min(k, max(-(-k // 2), at_least))  # components to label
    missing = target - np.unique(label).size
    if missing <= 0:
        return fit
    means, weights = fit.means.copy(), fit.weights.copy()
    held = np.bincount(label, weights=row_weight, minlength=k)
    unsplit: set[int] = set()
    for e in np.flatnonzero(held == 0)[:missing]:
        for c in np.argsort(-held, kind="stable"):
            members = np.flatnonzero(label == c)
            if c in unsplit or members.size < MIN_PAIR_ROWS:
                continue
            split = _split_candidate(rows[members], row_weight[members], family, d,
                                     max_iter=max_iter, tol=tol, seed=random_state * 7919 + c)
            if split is None:
                unsplit.add(int(c))
                continue
            _, two, first_keeps = split
            keep, move = (0, 1) if first_keeps else (1, 0)
            share = weights[c]
            means[c], weights[c] = two.means[keep], two.weights[keep] * share
            means[e], weights[e] = two.means[move], two.weights[move] * share
            halves = map_assign(rows[members], two.means, two.weights, family)
            label[members[halves == move]] = e
            held = np.bincount(label, weights=row_weight, minlength=k)
            break
    if np.array_equal(means, fit.means):
        return fit
    refit = fit_mixture_em(rows, means, weights, family=family, tol=tol, max_iter=max_iter,
                           sample_weight=row_weight, shrink="pulled")
    # ``label`` now holds the refill's partition: keep the EM unless it labels fewer
    if np.unique(fit_labels(rows, refit)).size >= min(target, np.unique(label).size):
        return refit
    # the EM emptied the refilled components again (a few dozen rows): the refilled fit
    return fit_mixture_em(rows, means, weights, family=family, tol=tol, max_iter=0,
                          sample_weight=row_weight, shrink="pulled")


def _split_candidate(sub: sp.csr_array, sub_weight: np.ndarray, family: Family, d: int, *,
                     max_iter: int, tol: float, seed: int
                     ) -> tuple[float, MixtureEMResult, bool] | None:
    """A component's split candidate on its rows ``sub`` (module docstring, 2.): (gain net of
    optimism, the two-component fit, whether its first component holds more of the weight),
    or None when the rows' between-component direction does not split them."""
    projection = between_direction(sub, sub_weight, family, random_state=seed)
    if projection is None:
        return None
    side = (projection > 0).astype(np.int64)
    if side.min() == side.max():
        return None
    two = fit_from_partition(sub, sub_weight, side, 2, family=family, max_iter=max_iter, tol=tol)
    on_sub = WeightedRows(sub, d, family, sub_weight)
    one = on_sub.corrected(_one_component(sub, sub_weight, family))
    first_keeps = sub_weight[side == 0].sum() >= sub_weight[side == 1].sum()
    return on_sub.corrected(two) - one, two, bool(first_keeps)


def _merge_candidate(sub: sp.csr_array, sub_weight: np.ndarray, side: np.ndarray,
                     family: Family, d: int, *, max_iter: int, tol: float
                     ) -> tuple[float, np.ndarray, MixtureEMResult]:
    """A pair's merge candidate on its rows ``sub`` (module docstring, 1.): (loss net of
    optimism, the merged component's mean, the pair's two-component fit), from EM on the
    pair's partition ``side``."""
    pair = fit_from_partition(sub, sub_weight, side, 2, family=family, max_iter=max_iter,
                              tol=tol)
    one = _one_component(sub, sub_weight, family)
    on_sub = WeightedRows(sub, d, family, sub_weight)
    return on_sub.corrected(pair) - on_sub.corrected(one), one.means[0], pair


def _two_parts(sub: sp.csr_array, sub_weight: np.ndarray, two: MixtureEMResult) -> float:
    """What a two-component Bernoulli fit ``two`` of the rows ``sub`` gains in evidence over
    one component (module docstring, "Ranked by the evidence"): the evidence of its MAP
    partition of them less that of the rows together
    (:func:`streammom.evidence.labels_evidence`)."""
    together = np.zeros(sub.shape[0], dtype=np.int64)
    return (labels_evidence(sub, sub_weight, fit_labels(sub, two), 2)
            - labels_evidence(sub, sub_weight, together, 1))


def _one_move(rows: sp.csr_array, row_weight: np.ndarray, fit: MixtureEMResult,
              family: Family, *, max_iter: int, tol: float, random_state: int,
              anneal: Sequence[float], trials: int, evidence_margin: float | None,
              evidence_check: bool, cache: MoveCache) -> MixtureEMResult:
    """One split-and-merge move on ``fit``: the more likely fit, or ``fit`` itself."""
    k, d = fit.means.shape
    if k < 3:
        return fit
    joint = log_likelihood_matrix(rows, fit.means, fit.weights, family)
    resp = normalise_joint(joint)[1]
    label = resp.argmax(axis=1)
    kept_by_evidence = evidence_check or evidence_margin is not None
    ranked_by_evidence = family == "bernoulli" and evidence_check and RANK_BY_EVIDENCE
    splits: dict[int, tuple[float, MixtureEMResult, bool]] = {}
    for c in range(k):
        members = np.flatnonzero(label == c)
        if members.size < MIN_PAIR_ROWS:
            continue
        key = (c, max_iter, digest(members, np.array([tol, random_state])))
        if key not in cache.splits:
            cache.splits[key] = _split_candidate(
                rows[members], row_weight[members], family, d, max_iter=max_iter, tol=tol,
                seed=random_state * 7919 + c)
        if (split := cache.splits[key]) is None:
            continue
        if ranked_by_evidence:
            if key not in cache.split_evidence:
                cache.split_evidence[key] = _two_parts(rows[members], row_weight[members],
                                                       split[1])
            split = (cache.split_evidence[key], *split[1:])
        splits[c] = split
    # (gain − loss, a, b, c, merged mean; None: a removal of a = b)
    moves: list[tuple[float, int, int, int, np.ndarray | None]] = []
    for a, b in confused_pairs(resp, row_weight)[:MERGE_CANDIDATES]:
        members = np.flatnonzero((label == a) | (label == b))
        if members.size < MIN_PAIR_ROWS:
            continue
        side = (label[members] == b).astype(np.int64)
        pair_key = (a, b, max_iter, digest(members, side, np.array([tol])))
        if pair_key not in cache.merges:
            cache.merges[pair_key] = _merge_candidate(rows[members], row_weight[members], side,
                                                      family, d, max_iter=max_iter, tol=tol)
        loss, merged_mean, pair = cache.merges[pair_key]
        if ranked_by_evidence:
            if pair_key not in cache.merge_evidence:
                cache.merge_evidence[pair_key] = _two_parts(rows[members], row_weight[members],
                                                            pair)
            loss = cache.merge_evidence[pair_key]
        moves.extend((gain - loss, a, b, c, merged_mean) for c, (gain, _, _) in splits.items()
                     if c not in (a, b))
    for e, loss in enumerate(removal_losses(joint, fit.weights, row_weight)):
        moves.extend((gain - loss, e, e, c, None) for c, (gain, _, _) in splits.items()
                     if c != e)
    moves.sort(key=lambda m: (-m[0], m[1], m[2], m[3]))
    tried = moves[:trials] if trials > 0 else [m for m in moves[:1] if m[0] > 0]
    if not tried:
        return fit
    by_evidence = evidence_margin is not None
    # A move's result is kept when its value passes the bar: its partition's evidence past a
    # margin (the check, or moves by the evidence), else its likelihood net of its optimism.
    value: Callable[[MixtureEMResult], float]
    if kept_by_evidence:
        value = cache.fit_evidence
        bar = value(fit) + (CHECK_MARGIN if evidence_check else float(evidence_margin or 0.0))
    else:
        value = WeightedRows(rows, d, family, row_weight).corrected
        bar = value(fit)
    for _, a, b, c, merged in tried:
        _, two, first_keeps = splits[c]
        keep, move = (0, 1) if first_keeps else (1, 0)
        means, weights = fit.means.copy(), fit.weights.copy()
        share_c = weights[c]
        if merged is not None:  # a merge; a removal (a = b) frees a's slot alone
            means[a], weights[a] = merged, weights[a] + weights[b]
        means[c], weights[c] = two.means[keep], two.weights[keep] * share_c
        means[b], weights[b] = two.means[move], two.weights[move] * share_c
        out = fit_mixture_em(rows, means, weights, family=family, tol=tol, max_iter=max_iter,
                             sample_weight=row_weight, anneal=anneal, shrink=by_evidence)
        if value(out) > bar:
            return out
    return fit
