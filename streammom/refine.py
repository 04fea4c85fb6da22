"""Likelihood refinement of the streaming tree's routers: EM over the leaves at every refit.

The moment splits (design §4) are the start; a refit then treats the k leaves as the
components of one Bernoulli or multinomial mixture (design §5 "likelihood refinement") and
runs a few EM passes on the union of the leaves' reservoirs. Each internal node then routes by
MAP between its two subtrees, each subtree collapsed to one component of the refined mixture:

* start: the partition of those rows by the routers as they stand after the refit's moment
  steps (the moment routers wherever the refit recomputed a split, so drift is followed):
  each leaf's weighted mean and share of its rows; a leaf that receives no row starts from its
  exact sums, μ_l = s_l / W_l (Bernoulli) or s_l / T1_l (multinomial), π_l ∝ W_l;
* EM (:func:`streammom.mixture.fit_mixture_em`, thesis ch. 4 §4.4 / ch. 6 §6.3) on the
  reservoir rows, each row weighted W_l / |reservoir_l| (it stands for that many events),
  at most ``max_iter`` passes and passes × rows ≤ :data:`EM_WORK` × the rows' share of the
  events learned (:func:`em_passes`: the leaves' sums' steps below carry the events the
  rows do not hold);
* spectral restart: the tree's partition is one local optimum, fixed by the order the stream
  arrived in (which clusters the first refits split off). The same rows also get the flat
  estimate of :class:`streammom.spectral.SpectralMixture` — ASVTD of the k-component mixture
  (thesis ch. 4 Alg. 2) on the weighted rows, then the same EM — and the better of the two
  fits is kept (the same k, rows and weights, so the two are comparable; "better" is the last
  bullet's). The restart's components are put on the leaves by the assignment
  that keeps the most row weight where it is (Hungarian method on the k × k overlap of the
  leaves' rows and the components' MAP rows), so the tree's structure stays and routing
  follows the better mixture. Its cost, one ASVTD and one more EM, is O(nnz · k) per pass, so
  it runs while rows × leaves ≤ ``RESTART_WORK`` (≲ 0.1 s at d = 1,024): on every refit of a
  short stream or a small tree, on the young tree of a long one. Past :data:`WORK_LEAVES`
  (16) leaves this bound and the re-splits' are on the rows alone (4,096 and 8,192): a
  tree of k leaves holds up to k reservoirs, so a bound on rows × leaves shut a 32-leaf
  tree out of every search once it held 2,048 rows (10,000-event code streams of 32 leaves:
  0.80–0.86 × the oracle's ARI, 0.88–0.91 with the bound on the rows; BENCHMARKS.md
  "Skewed cluster shares"; since the shrinkage and the evidence as the restarts' judge both
  bounds reach 0.95–0.97 ×, "Fits compared by the evidence of their partition");
* pair re-splits (:mod:`streammom.pair_resplit`), for code sets (Bernoulli): the most
  confused pairs of components of the routers' fit are fitted again, two at a time, from the
  top eigenvector of their rows' between-component covariance; the fit is kept only when EM
  from there is the better fit;
* split-and-merge moves (:mod:`streammom.split_merge`), under the same bound: where two
  components share one cluster and a third holds two, the pair is merged and the third split
  along its rows' between-component direction, kept when EM from there is more likely; the
  moves repeat until none gains. Then a second round: the
  :data:`~streammom.split_merge.MOVE_TRIALS` best candidates each tried by an annealed EM on
  all the rows whatever their local gain, a move kept when its partition's evidence passes
  the current one's by more than :data:`~streammom.split_merge.CHECK_MARGIN` nats
  (``evidence_check``). On code sets over a wide vocabulary of rare codes the local estimate
  of a needed split is below zero, and so is the whole move's likelihood net of its optimism
  (ICD-10-CM phenotype streams, d ≈ 4,600–10,000: 0.76–0.90 × the oracle's ARI with the first
  round alone, 0.90–0.98 with both; BENCHMARKS.md "Moves tried by the full EM" and "The moves
  tried by the full EM kept by the evidence"). The three steps in sequence are
  :func:`streammom.searches.search`;
* the searches on a sample, past their bound (:func:`streammom.searches.searched_on_sample`,
  code sets; :data:`SAMPLE_SEARCH`): a moved stream's full refit (the stream's sample given,
  as for the restarts below) whose rows × leaves pass ``PAIR_WORK`` runs the same three
  steps on each leaf's reservoir thinned to its share of the bound's rows, weighted up so
  each leaf keeps its weight, then one shrunk EM on all the rows from what they found, kept
  when its partition of all the rows is the more evident; its components are put on the
  leaves as the spectral restart's are (above). Without it such a refit only polished the tree's
  partition, however the stream had moved (50,000 × 1,000 × 16 code streams half sorted by
  cluster: 0.870 / 0.914 → 0.959 / 0.959 × the oracle's ARI; BENCHMARKS.md "Searches on a
  sample of a long stream's rows");
* restarts from a moved stream's sample: past the restarts' bound, when the stream moved
  since the last refit (:mod:`streammom.stream_shift`), the spectral restart and the k-means
  start run on the root's reservoir — a sample of the whole stream, one reservoir of rows —
  and each starts the same EM on all the rows; kept when better (the last bullet's judge).
  The tree a moved stream grew is fitted to its early clusters, and its rows are too many
  for the restarts above (events arriving cluster by cluster, 50,000 × 1,000 × 16, seed 1:
  0.747 → 0.869 × the oracle's ARI; BENCHMARKS.md "Streams whose clusters arrive in
  phases");
* k-means start: while the rows are at most :data:`~streammom.kmeans_restart.KMEANS_ROWS` and
  at least half the events learned (a short stream, whose reservoirs hold nearly all of it),
  one more start: k-means on the rows' spectral embedding, then the same EM
  (:mod:`streammom.kmeans_restart`). When it is the better fit, its
  components (put on the leaves as above) become the leaves' scores, which label the events;
  the routers below keep following the tree's or the spectral fit, so the sums and the tree's
  growth do not depend on it (steering the young trees of long streams with it moved their
  final ARI either way, BENCHMARKS.md "Short streams");
* annealed restart: under the spectral restart's bound (``RESTART_WORK``), the best of
  those fits starts one more EM whose first passes are tempered
  (:data:`ANNEAL_BETAS`, deterministic annealing, Ueda & Nakano 1998; see
  :mod:`streammom.mixture`): the flattened posteriors let its components leave the local
  optimum the start put them in. When it ends the better fit, it becomes the leaves' scores as
  the k-means start does (the routers stay). On the synthetic code streams of 500 events it
  finds a higher likelihood on every seed tried (BENCHMARKS.md "Annealed restart");
* moves on a short stream's scores: under the k-means start's condition
  (:func:`~streammom.kmeans_restart.is_short_stream`), for code sets, split-and-merge moves
  on the scored fit, each move's EM starting with the annealed passes and the
  :data:`~streammom.split_merge.MOVE_TRIALS` best candidates tried whatever the sign
  of their local gain (:mod:`streammom.split_merge`); kept when more likely net of optimism
  (up to :data:`SCORE_MOVES_TIC_ROWS` rows) or when their partition is the more evident
  (above), as the leaves' scores. On the 500-event code streams it mends a stream whose
  scores held two clusters in one leaf (BENCHMARKS.md "Moves on a short stream's scores");
* for code sets, a restart's fit replaces the one it would (:func:`_better`), and a re-split
  pair the pair it would (:mod:`streammom.pair_resplit`), when its partition is the more evident
  (:mod:`streammom.evidence`: the rows' marginal likelihood with the rates integrated out under
  the shrinkage's prior, and the labels' with the shares integrated out under a Dirichlet prior
  fitted to the leaves' events, :mod:`streammom.shares_prior`). The likelihood, even net of its
  optimism (TIC), prefers fits that cut a heavy cluster in two and merge two light ones: both
  have k components, so TIC charges them alike, while the evidence charges a component's rates
  about (p/2) log N_j. On code streams with Dirichlet(0.7) leaf shares the spectral restart and
  the re-splits judged by the likelihood took a 50,000-event stream from 0.98 to 0.71 × the
  oracle's ARI by its fifth thousand events (0.80 at its end); judged by the evidence it stays
  at 0.98 (BENCHMARKS.md "Fits compared by the evidence of their partition"). The first round of
  moves still ranks and keeps its candidates by the likelihood net of its optimism
  (:func:`~streammom.mixture.more_likely`; :mod:`streammom.split_merge`): on weighted rows a
  heavy leaf's rows stand for several events each, and a fit that spends components on them
  gains likelihood from their noise as many times over (BENCHMARKS.md "Skewed cluster shares").
  Token counts keep the raw likelihood: TIC's one unit a parameter overstates the optimism of a
  vocabulary of tens of thousands of rare terms (20 Newsgroups at 55,202 terms: 0.203 → 0.152),
  and the shrinkage's prior is for code sets;
* empirical-Bayes shrinkage, for code sets (:mod:`streammom.shrinkage`): the kept fits —
  the routers' and the scores' — each run one more EM whose M-steps shrink every code's rate
  toward its pooled rate by a strength τ_h estimated per code from the data (type-II maximum
  likelihood of a Beta prior): background codes pool, signature codes keep their rates. The
  search above compares maximum-likelihood fits; this last EM moves the chosen one to the
  posterior means, which on short streams label nearer the oracle than the likelihood's
  optimum (300-event code streams 0.75 → 0.86 × the oracle's ARI; random-tree streams 31 →
  39 of 40 at ≥ 0.9; BENCHMARKS.md "Shrinkage toward the pooled rates"); ``max_iter``
  passes under the restarts' bound, :func:`em_passes` above it. Where no search compares
  fits (a light refit, or rows above the re-splits' bound ``PAIR_WORK``) the refinement's
  own EM is the shrunk one: one EM, not two. The leaves' sums' steps below shrink with the
  fit's own τ;
* moves by the evidence, on a short stream's shrunk scores (code sets): split-and-merge moves
  again, each move's EM shrunk and kept when it raises the evidence of the partition (the
  rows' marginal likelihood with the rates integrated out under the shrinkage's prior;
  :mod:`streammom.split_merge`, "By the evidence"), until none does; their end result
  replaces the scores only when its evidence passes theirs by more than
  :data:`~streammom.split_merge.EVIDENCE_MARGIN` nats. On a few hundred events maximum
  likelihood is indifferent between the truth's partition and one with two sibling clusters
  in one leaf and a cluster across two; the evidence is not (500-event code streams: 7 of 56
  below 0.9 × the oracle's ARI → 2; BENCHMARKS.md "Moves by the evidence"). The routers keep
  their fit;
* prior strengths pulled together, for the scores of code sets at a refit whose searches
  ran: the scores' fit runs one more shrunk EM whose τ_h are pulled toward one common
  strength (:func:`streammom.shrinkage.pulled_prior_strengths`). A rare code's own τ_h comes
  from the one or two components that hold it and is often small, so the component that
  happens to hold it keeps a high rate for it and the labels follow the sample's rare codes;
  pulled toward the common strength it pools like the others, while codes whose counts pin
  their strength keep it (BENCHMARKS.md "Prior strengths pulled toward a common one"). Only
  the labels take it: the search and the routers keep each code's own τ_h, with which they
  do better (one common τ in every M-step: 300-event code streams 10 → 1 of 26 at ≥ 0.9 ×
  the oracle's ARI);
* half the components labelled (:func:`streammom.split_merge.labelled_floor`): if fewer
  than ⌈k/2⌉ of the scores' components (or than ``min_labelled``, half the engine's leaf
  budget) then hold a MAP row (the evidence's moves on a short
  stream of many weak clusters can empty half of them), empty ones take halves of the
  splits of the components holding most rows, then pulled shrunk EM (BENCHMARKS.md "Half the
  components labelled");
* the partition climbs its evidence, and more starts (:func:`more_starts`), for the scores of
  a short stream of code sets: the scores' partition of the rows moves, row by row, to the
  local optimum of the evidence that judges it (:mod:`streammom.evidence_ascent`: iterated
  conditional modes on the collapsed Beta–Bernoulli mixture, every row's gain one sparse
  product); where the scores label every leaf, :data:`SCORE_STARTS` k-means starts more
  (other seeds of the k-means start, one embedding) each go through the shrunk EM and the
  same climb, and the most evident replaces the scores' climbed partition when it passes it
  by :data:`STARTS_MARGIN` a row. The partition kept becomes the scores, each component at
  its posterior mean rates and share (:func:`streammom.evidence_ascent.partition_fit`), so
  the labels are the judge's choice. EM's MAP labels are not the evidence's optimum: on the
  300- and 500-event code streams the scores' partitions stood 0–26 nats (median 3–4) below
  their climbed partitions, and on the 300-event streams that missed EM from the true
  labels, the truth's basin, was the more evident on 10 of 13. Where the scores label
  fewer leaves, the evidence prefers the merged clusters to every partition of k, and more
  starts would only merge more: they are not tried (the k-means start from several
  seedings judged alone moved those streams down by up to 0.08). Short code streams 89 → 92
  of 104 at ≥ 0.9 × the oracle's ARI, streams of skewed shares 14 → 15 of 16 (BENCHMARKS.md
  "The partition climbs its evidence"; before, "More starts for scores that label every
  leaf");
* the leaves' sums (:mod:`streammom.stream_sums`): the kept fits take the events outside the
  reservoirs into three more M-steps through the leaves' exact sums, in proportion to the
  share of each leaf's events its reservoir does not hold (nothing changes while the
  reservoirs hold the stream), each fit only while it agrees with the tree's partition of
  the rows (``label``: the sums are that partition's events);
* subtree c of node v: π_c = Σ_{l∈c} π_l and μ_c = Σ_{l∈c} a_l μ_l / Σ_{l∈c} a_l with
  a_l = π_l (Bernoulli) or π_l · T1_l / W_l (multinomial: token mass), then
  :func:`streammom.model.map_router` of (μ_c₀, μ_c₁), (π_c₀, π_c₁) (thesis Alg. 4, MAP);
* every leaf keeps its own component (μ_l, π_l) as a :class:`~streammom.model.LeafScore`:
  the model labels an event by the MAP leaf of the refined mixture (thesis eq. 4.2), which
  the collapsed routers only approximate (a subtree of several components is not one), while
  the sums keep following the routers (the start of the next refit's EM and moment steps).

The events a refined router sends to a leaf update that leaf's sums and reservoir, from which
the next refit starts again: a stepwise classification EM over the stream whose state is the
sums and the reservoirs, so it stays exact, mergeable and decayable, and every step is
deterministic (reservoirs are seeded). On the public text and binary sets this moves the
streaming tree most of the way to the batch mixture (BENCHMARKS.md "streaming quality").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

from streammom.decompose import asvtd
from streammom.estimators import Family
from streammom.evidence import EvidenceCache, better_fit, fit_labels
from streammom.evidence_ascent import ascend_evidence, partition_fit
from streammom.held_columns import held_columns, scatter_rows
from streammom.kmeans_restart import is_short_stream, kmeans_restart, kmeans_starts
from streammom.mixture import (
    MixtureEMResult,
    fit_mixture_em,
    log_likelihood_matrix,
    map_assign,
    partition_sums,
)
from streammom.model import LeafScore, Router, leaf_scores, map_router
from streammom.searches import search, searched_on_sample
from streammom.shares_prior import shares_concentration
from streammom.spectral import family_range
from streammom.split import Split, refine_split_em
from streammom.split_merge import (
    EVIDENCE_MARGIN,
    MOVE_TRIALS,
    MoveCache,
    labelled_floor,
    split_merge,
)
from streammom.stream_sums import with_stream_sums
from streammom.tree import Node, subtree

__all__ = ["ANNEAL_BETAS", "EM_MIN_PASSES", "EM_WORK", "EVIDENCE_MOVES", "LIGHT_EM_PASSES",
           "LIGHT_EM_WORK", "MOVE_BETAS", "PAIR_EM_PASSES", "PAIR_WORK", "SAMPLE_SEARCH",
           "SCORE_MOVES_TIC_ROWS", "SCORE_STARTS", "SHRINK", "STARTS_MARGIN", "WORK_LEAVES",
           "RefinedRouters", "data_split", "em_passes", "gains_significantly", "light_em_passes",
           "match_components", "more_starts", "principal_bisection", "refine_routers",
           "sample_search_work_of", "spectral_restart", "split_gain", "split_gain_rows",
           "subtree_centre"]

_CENTRE_FLOOR = 1e-6
#: The spectral restart runs while rows × leaves ≤ this (its cost is O(nnz · k) per EM pass, so
#: about that of 20 EM passes over 4,096 rows of 16 leaves: ≲ 0.1 s at d = 1,024).
RESTART_WORK = 65_536
#: The refinement's EM work bound, passes × rows: 100 passes up to 8,192 rows, fewer above
#: (a long stream's many-leaf reservoirs), at least EM_MIN_PASSES; scaled by the rows' share
#: of the events learned (:func:`em_passes`).
EM_WORK = 819_200
EM_MIN_PASSES = 20
#: EM passes of a light refit's refinement before the sums' steps, at most, and their work
#: bound: passes × rows ≤ LIGHT_EM_WORK × the rows' share of the events learned, with no
#: floor (:func:`light_em_passes`). A quarter of a full refit's: a light refit runs on the
#: daemon's loop, and 12 passes over 16,384 rows of 16 leaves take ~0.1 s (50 took 0.43 s,
#: and a loop stall of 1.36 s in ``bench/daemon_defaults.py``).
LIGHT_EM_PASSES = 50
LIGHT_EM_WORK = EM_WORK // 4
#: EM passes of the pair re-splits (each pair's two fits, then the whole mixture's).
PAIR_EM_PASSES = 20
#: The pair re-splits run while rows × leaves ≤ this (twice the restarts' bound: 16 leaves of
#: 8,192 rows). Above it — a long stream's full 16-leaf reservoirs, 0.2 s a refit at
#: d = 2,000 — the leaves' sums and the light refits carry the refinement.
PAIR_WORK = 2 * RESTART_WORK
#: Leaves counted in the bounds' rows × leaves at most: past 16 leaves the bounds are on the
#: rows alone (4,096 for the restarts, 8,192 for the re-splits and moves).
WORK_LEAVES = 16
#: Up to this many rows (one default reservoir) the moves on a short stream's scores are kept
#: by the likelihood net of its optimism, as measured on the 300- to 1,000-event code streams;
#: above it by the evidence of their partitions (``split_merge(evidence_check=True)``): on a
#: 5,000-event stream of skewed shares the likelihood's moves at its 3,000-row refit cut the
#: heaviest cluster (0.955 → 0.875 × the oracle; BENCHMARKS.md "Short-stream searches up to
#: 4,096 rows").
SCORE_MOVES_TIC_ROWS = 1_024
#: The annealed restart's inverse temperatures, one tempered pass each: 6 steps from 0.3 to 1
#: (geometric), 3 passes a step. Hotter starts (0.1) merged components on the 500-event code
#: streams; 12 steps of 5 passes found the same fits (BENCHMARKS.md "Annealed restart").
#: Empty: no annealed restart.
ANNEAL_BETAS: tuple[float, ...] = tuple(float(b) for b in np.repeat(np.geomspace(0.3, 1.0, 6), 3))
#: The tempered passes before the EM of each move tried by the full EM (the second round of
#: split-and-merge moves on the routers' fit; module docstring): the annealed restart's.
MOVE_BETAS: tuple[float, ...] = ANNEAL_BETAS
#: Whether a moved stream's full refit of code sets past the searches' bound (``PAIR_WORK``)
#: runs them on a sample of its rows (:func:`streammom.searches.searched_on_sample`; module
#: docstring). False: an ablation, not a setting.
SAMPLE_SEARCH = True
#: Whether every refit's code-set fits are shrunk by empirical Bayes (:mod:`streammom.shrinkage`;
#: module docstring). False: an ablation, not a setting.
SHRINK = True
#: Whether a short stream's shrunk scores take split-and-merge moves by the evidence
#: (:mod:`streammom.split_merge`, "By the evidence"; module docstring). False: an ablation.
EVIDENCE_MOVES = True
#: Whether a searched refit's code-set scores end with an EM whose prior strengths are pulled
#: toward a common one (:func:`streammom.shrinkage.pulled_prior_strengths`; module
#: docstring). False: an ablation.
PULLED_STRENGTH_SCORES = True
#: Whether a searched refit's code-set scores keep at least half their components labelling
#: rows (:func:`streammom.split_merge.labelled_floor`; module docstring). False: an ablation.
LABELLED_FLOOR = True
#: k-means starts more a short stream's code-set scores try when they label every leaf
#: (:func:`more_starts`; module docstring); 0: an ablation (the scores' partition still
#: climbs its evidence).
SCORE_STARTS = 8
#: Nats of partition evidence a row by which the most evident of those starts must pass the
#: scores to replace them (:func:`more_starts`): the evidence of a hard partition is fitted to
#: the rows, and the best of eight fits gains from their noise alone, the more the more rows
#: it can relabel. On the short code streams (300, 500 and 800 events, seeds 0–25) the starts
#: that gained up to 3.9 nats moved the ARI both ways (−0.056 to +0.025 of the oracle's), the
#: nine that gained 4.3–23 raised it (+0.017 to +0.086); on the 2,000-event ICD phenotype
#: streams gains of 4–10 nats lowered it by up to 0.017. 4 nats at 300 rows, 27 at 2,000
#: (BENCHMARKS.md "More starts for scores that label every leaf"). With every candidate
#: climbed to its evidence's optimum a margin of 0 did as well, not better (300-event streams
#: 15 of 26 at the bar either way, means 0.903 and 0.899; 500 events 24 of 26 both): kept
#: (BENCHMARKS.md "The partition climbs its evidence").
STARTS_MARGIN = 4.0 / 300


@dataclass(frozen=True)
class RefinedRouters:
    """The refined router of every internal node, and how the EM went."""

    routers: dict[int, Router]
    n_iter: int
    converged: bool
    n_rows: int
    restarted: bool  # a restart's fit was kept, spectral or k-means (module docstring)
    log_likelihood: float  # Σ_i w_i log p(x_i) of the kept fit on the reservoir rows
    scores: dict[int, LeafScore]  # every leaf's component of the kept fit
    #: rows × leaves of the searches run on a sample (:func:`searched_on_sample`), 0 when none
    #: ran: the engine charges their cost (:func:`streammom.refit_budget.sample_search_cost_events`)
    sample_search_work: int = 0


def _route_rows(nodes: Mapping[int, Node], root_id: int, X: sp.csr_array) -> np.ndarray:
    """The leaf of every row under the tree's current routers (root → leaf)."""
    node = np.full(X.shape[0], root_id, dtype=np.int64)
    frontier = [(root_id, np.arange(X.shape[0]))]
    while frontier:
        nid, rows = frontier.pop()
        v = nodes[nid]
        if v.is_leaf or rows.size == 0:
            node[rows] = nid
            continue
        assert v.router is not None
        side = v.router.side(X[rows])
        frontier.extend((c, rows[side == j]) for j, c in enumerate(v.children))
    return node


def _start(rows: sp.csr_array, row_weight: np.ndarray, label: np.ndarray,
           leaves: list[Node], family: Family) -> tuple[np.ndarray, np.ndarray]:
    """(k, d) centres and (k,) shares of the rows' partition by the current routers (``label``:
    each row's leaf, an index into ``leaves``); a leaf that receives no row starts from its
    own sums."""
    sums, mass = partition_sums(rows, row_weight, label, len(leaves))
    den = sums.sum(axis=1) if family == "multinomial" else mass
    for i in np.flatnonzero(den <= 0):
        v = leaves[i]
        sums[i] = v.acc.s
        mass[i] = v.acc.weight
        den[i] = v.acc.t1 if family == "multinomial" else v.acc.weight
    mu = sums / np.maximum(den, np.finfo(float).tiny)[:, None]
    if family == "multinomial":
        mu = np.maximum(mu, _CENTRE_FLOOR)
        mu /= mu.sum(axis=1, keepdims=True)
    return mu, mass / mass.sum()


def refine_routers(nodes: Mapping[int, Node], root_id: int, family: Family, *,
                   max_iter: int, tol: float = 1e-4, random_state: int = 0,
                   n_events: int | None = None, weight_scale: float = 1.0,
                   light: bool = False, min_labelled: int = 0,
                   sample: sp.csr_array | None = None) -> RefinedRouters | None:
    """EM over the leaves, then one MAP router per internal node (module docstring).

    None when there is nothing to refine: a single leaf, a leaf without weight or an empty
    reservoir (the moment routers stay). ``random_state`` seeds the spectral restart's
    whitening (Lanczos start vector) and the k-means start's seedings, so the result is
    deterministic. The routers come from the better of the tree's and the spectral fit; the
    leaves' scores from the best of those, the k-means fit, which runs only while the rows are
    at least half of ``n_events`` (the events the tree has learned; None: no such bound), and
    the annealed restart from the best of them (module docstring). Both fits then take the
    leaves' sums into their M-step (:func:`streammom.stream_sums.with_stream_sums`;
    ``weight_scale`` turns stored weights into true ones); ``log_likelihood`` is the kept
    EM fit's on the rows, before that step. The rows' share of ``n_events`` also scales the
    EM's work bound (:func:`em_passes`).

    ``light``: the refinement of a light refit (:meth:`StreamingHierarchy.refit
    <streammom.engine.StreamingHierarchy.refit>`): the tree's partition of the rows, the
    EM passes of :func:`light_em_passes` (many while the rows hold most of the stream, none
    on a small sample of a long one), no restart, re-split or move, then the sums' steps.

    ``sample``: the stream's sample (the root's reservoir) when the stream moved since the last
    refit, for the restarts from it (module docstring); None otherwise.

    ``min_labelled``: components the scores of a searched code-set refit keep labelling rows,
    besides half of the leaves (:func:`streammom.split_merge.labelled_floor`; the engine passes
    half its leaf budget, so a tree grown short of ``max_leaves`` still labels that many).
    """
    leaf_ids = sorted(nid for nid, v in nodes.items() if v.is_leaf)
    leaves = [nodes[nid] for nid in leaf_ids]
    if len(leaves) < 2 or any(v.acc.weight <= 0 or len(v.reservoir) == 0 for v in leaves):
        return None
    if family == "multinomial" and any(v.acc.t1 <= 0 for v in leaves):
        return None
    blocks = [v.reservoir.to_csr() for v in leaves]
    rows = sp.vstack(blocks, format="csr")
    row_weight = np.concatenate([np.full(b.shape[0], v.acc.weight / b.shape[0])
                                 for v, b in zip(leaves, blocks, strict=True)])
    label = np.searchsorted(np.array(leaf_ids), _route_rows(nodes, root_id, rows))
    mu0, pi0 = _start(rows, row_weight, label, leaves, family)
    coverage = 1.0 if not n_events else rows.shape[0] / n_events  # the rows' share of the stream
    passes = (light_em_passes(max_iter, rows.shape[0], coverage) if light
              else em_passes(max_iter, rows.shape[0], coverage))
    shrink = family == "bernoulli" and SHRINK
    work_leaves = min(len(leaves), WORK_LEAVES)  # the bounds' rows × leaves (docstring)
    searched = not light and rows.shape[0] * work_leaves <= PAIR_WORK  # fits compared below
    fit = fit_mixture_em(rows, mu0, pi0, family=family, tol=tol, max_iter=passes,
                         sample_weight=row_weight, shrink=shrink and not searched)
    if light:
        fit = with_stream_sums(rows, row_weight, fit, leaves, family, weight_scale=weight_scale,
                               label=label, shrink=shrink)
        return _refined(nodes, leaves, leaf_ids, family, fit, fit, rows.shape[0], False)
    restarts = rows.shape[0] * work_leaves <= RESTART_WORK  # spectral and annealed
    alt = None if not restarts else spectral_restart(
        rows, row_weight, len(leaves), family, max_iter=max_iter, tol=tol,
        random_state=random_state)
    restarted = False
    # evidences and the moves' work, shared (exact); the labels' term under the shares' prior
    # fitted to the leaves (code sets: the evidence judges their fits)
    moves = MoveCache(rows, row_weight, shares_concentration(
        np.array([v.acc.weight for v in leaves])) if family == "bernoulli" else None)
    if alt is not None and _better(alt, fit, family, moves):
        fit = _on_leaves(alt, rows, row_weight, label, family)
        restarted = True
    if sample is not None and not restarts:  # a moved stream: restarts from its sample
        for start in _sample_starts(sample, len(leaves), family, max_iter=max_iter, tol=tol,
                                    random_state=random_state):
            alt = fit_mixture_em(rows, start.means, start.weights, family=family, tol=tol,
                                 max_iter=passes, sample_weight=row_weight,
                                 shrink=shrink and not searched)
            if _better(alt, fit, family, moves):
                fit = _on_leaves(alt, rows, row_weight, label, family)
                restarted = True
    # code sets only (on text it lowered R8's ARI: pair_resplit), within its work bound
    if family == "bernoulli" and searched:
        resplit = search(rows, row_weight, fit, family, tol=tol,
                         max_iter=min(max_iter, PAIR_EM_PASSES), random_state=random_state,
                         anneal=MOVE_BETAS, cache=moves)
        restarted |= resplit is not fit
        fit = resplit
    # moved, past the bound: the sample's rows × leaves, searched below (0: no search)
    sample_search_work = 0 if searched or sample is None else sample_search_work_of(family)
    if sample_search_work:
        found = searched_on_sample(
            rows, row_weight, [b.shape[0] for b in blocks], fit, family, moves,
            max_rows=PAIR_WORK // work_leaves, tol=tol, max_iter=min(max_iter, PAIR_EM_PASSES),
            passes=passes, random_state=random_state, anneal=MOVE_BETAS)
        if found is not None:
            fit, restarted = _on_leaves(found, rows, row_weight, label, family), True
    scored = fit  # the leaves' scores (labels): also the k-means restart's fit if better
    km = kmeans_restart(rows, row_weight, len(leaves), family, max_iter=max_iter, tol=tol,
                        random_state=random_state, n_events=n_events)  # None: a long stream
    if km is not None and _better(km, fit, family, moves):
        scored = _on_leaves(km, rows, row_weight, label, family)
    if ANNEAL_BETAS and restarts:  # annealed, from the best fit so far
        annealed = fit_mixture_em(rows, scored.means, scored.weights, family=family, tol=tol,
                                  max_iter=max_iter, sample_weight=row_weight,
                                  anneal=ANNEAL_BETAS)
        if _better(annealed, scored, family, moves):
            scored = annealed  # its components are still the leaves' (it started from them)
    short = is_short_stream(rows, len(leaves), n_events)  # the rows are the stream
    if family == "bernoulli" and short:
        scored = split_merge(rows, row_weight, scored, family, tol=tol, max_iter=max_iter,
                             random_state=random_state, anneal=ANNEAL_BETAS,
                             trials=MOVE_TRIALS, cache=moves,  # moves on a short stream's scores
                             evidence_check=rows.shape[0] > SCORE_MOVES_TIC_ROWS)
    restarted |= scored is not fit
    if shrink and searched:  # the searched fits, the routers' and the scores', each shrunk
        polish = max_iter if restarts else passes
        shrunk = fit_mixture_em(rows, fit.means, fit.weights, family=family, tol=tol,
                                max_iter=polish, sample_weight=row_weight, shrink=True)
        scored = shrunk if scored is fit else fit_mixture_em(
            rows, scored.means, scored.weights, family=family, tol=tol, max_iter=polish,
            sample_weight=row_weight, shrink=True)
        fit = shrunk
    if shrink and searched and EVIDENCE_MOVES and short:
        moved = split_merge(rows, row_weight, scored, family, tol=tol, max_iter=max_iter,
                            random_state=random_state, anneal=ANNEAL_BETAS,
                            trials=MOVE_TRIALS, evidence_margin=0.0, cache=moves)
        if moved is not scored and (moves.fit_evidence(moved)
                                    > moves.fit_evidence(scored) + EVIDENCE_MARGIN):
            scored, restarted = moved, True  # the scores' fit only: the routers keep theirs
    if shrink and searched and PULLED_STRENGTH_SCORES:  # the scores' last EM
        scored = fit_mixture_em(rows, scored.means, scored.weights, family=family, tol=tol,
                                max_iter=max_iter, sample_weight=row_weight, shrink="pulled")
    if shrink and searched and LABELLED_FLOOR:  # at least half the leaves label rows
        scored = labelled_floor(rows, row_weight, scored, family, max_iter=max_iter, tol=tol,
                                random_state=random_state, at_least=min_labelled)
    if shrink and searched and short:
        starts = more_starts(rows, row_weight, scored, family, moves, max_iter=max_iter,
                             tol=tol, random_state=random_state)
        if starts is not scored:
            scored, restarted = _on_leaves(starts, rows, row_weight, label, family), True
    summed = with_stream_sums(rows, row_weight, fit, leaves, family, weight_scale=weight_scale,
                              label=label, shrink=shrink)
    scored = summed if scored is fit else with_stream_sums(rows, row_weight, scored, leaves,
                                                           family, weight_scale=weight_scale,
                                                           label=label, shrink=shrink)
    return replace(_refined(nodes, leaves, leaf_ids, family, summed, scored, rows.shape[0],
                            restarted), sample_search_work=sample_search_work)


def sample_search_work_of(family: Family) -> int:
    """Rows × leaves a moved stream's refit past the searches' bound searches on a sample
    (:func:`streammom.searches.searched_on_sample`, module docstring): ``PAIR_WORK`` for code
    sets while :data:`SAMPLE_SEARCH` is on, 0 otherwise (the cost model charges it:
    :func:`streammom.refit_budget.sample_search_cost_events`).

    >>> sample_search_work_of("bernoulli") == PAIR_WORK, sample_search_work_of("multinomial")
    (True, 0)
    """
    return PAIR_WORK if family == "bernoulli" and SAMPLE_SEARCH else 0


def more_starts(rows: sp.csr_array, row_weight: np.ndarray, scored: MixtureEMResult,
                family: Family, cache: EvidenceCache, *, max_iter: int, tol: float,
                random_state: int) -> MixtureEMResult:
    """A short stream's code-set scores moved to their evidence's local optimum and searched
    from more starts (module docstring, "more starts"): the partition of ``scored`` climbs
    its evidence by row moves (:func:`streammom.evidence_ascent.ascend_evidence`); while it
    labels every component, :data:`SCORE_STARTS` k-means starts
    (:func:`streammom.kmeans_restart.kmeans_starts`, seeds ``random_state`` + 1, + 2, …) each
    go through shrunk EM and the same climb, and the most evident of those labelling every
    component replaces it when it passes by :data:`STARTS_MARGIN` a row. The partition kept
    becomes the scores (:func:`streammom.evidence_ascent.partition_fit`); ``scored`` itself
    when neither a move nor a start changed its partition. ``cache``: made for ``rows`` and
    ``row_weight``, with the shares' concentration (code sets). Its components are in the
    start's order (the caller puts them on the leaves)."""
    k = scored.means.shape[0]
    alpha = cache.concentration
    if alpha is None:
        raise ValueError("more_starts judges by the evidence under the shares' prior: the cache "
                         "needs its concentration")
    label = fit_labels(rows, scored)
    best, value = ascend_evidence(cache.summed_rows, row_weight, label, k, alpha)
    if SCORE_STARTS > 0 and np.unique(label).size == k:
        bar = value + STARTS_MARGIN * rows.shape[0]
        seeds = [random_state + r for r in range(1, SCORE_STARTS + 1)]
        for start in kmeans_starts(rows, row_weight, k, family, max_iter=max_iter, tol=tol,
                                   seeds=seeds):
            shrunk = fit_mixture_em(rows, start.means, start.weights, family=family, tol=tol,
                                    max_iter=max_iter, sample_weight=row_weight, shrink=True)
            found, found_value = ascend_evidence(cache.summed_rows, row_weight,
                                                 fit_labels(rows, shrunk), k, alpha)
            if found_value > bar and np.unique(found).size == k:
                best, bar = found, found_value
    if np.array_equal(best, label):
        return scored
    return partition_fit(rows, row_weight, best, k, alpha)


def _sample_starts(sample: sp.csr_array, k: int, family: Family, *, max_iter: int, tol: float,
                   random_state: int) -> list[MixtureEMResult]:
    """The spectral restart and the k-means start fitted on ``sample``, the stream's sample
    (the root's reservoir, at most one reservoir of rows: within both searches' bounds), for
    a moved stream's refinement whose rows are past the restarts' bound (module docstring)."""
    w = np.ones(sample.shape[0])
    out = []
    alt = spectral_restart(sample, w, k, family, max_iter=max_iter, tol=tol,
                           random_state=random_state)
    if alt is not None:
        out.append(alt)
    km = kmeans_restart(sample, w, k, family, max_iter=max_iter, tol=tol,
                        random_state=random_state)
    if km is not None:
        out.append(km)
    return out


def _better(new: MixtureEMResult, old: MixtureEMResult, family: Family, cache: MoveCache
            ) -> bool:
    """Whether a restart's fit ``new`` beats ``old`` on the refit's weighted rows (those of
    ``cache``; module docstring): :func:`streammom.evidence.better_fit`, by the raw
    log-likelihood for token counts."""
    return better_fit(new, old, family, cache, net_of_optimism=False)


def _refined(nodes: Mapping[int, Node], leaves: list[Node], leaf_ids: list[int],
             family: Family, fit: MixtureEMResult, scored: MixtureEMResult, n_rows: int,
             restarted: bool) -> RefinedRouters:
    """The MAP router of every internal node from ``fit`` (its subtrees collapsed) and the
    leaves' scores from ``scored`` (module docstring)."""
    mass = fit.weights.copy()
    if family == "multinomial":  # token mass of each leaf: share × mean length
        mass *= np.array([v.acc.t1 / v.acc.weight for v in leaves])
    index = {nid: i for i, nid in enumerate(leaf_ids)}
    routers: dict[int, Router] = {}
    for nid, v in nodes.items():
        if v.is_leaf:
            continue
        centres, shares = [], []
        for c in v.children:
            idx = [index[u] for u in subtree(nodes, c) if u in index]  # its leaves
            centres.append(subtree_centre(fit.means[idx], mass[idx]))
            shares.append(fit.weights[idx].sum())
        routers[nid] = map_router(np.vstack(centres), np.array(shares), family,
                                  floor=_CENTRE_FLOOR)
    scores = dict(zip(leaf_ids, leaf_scores(scored.means, scored.weights, family,
                                            floor=_CENTRE_FLOOR), strict=True))
    return RefinedRouters(routers, scored.n_iter, scored.converged, n_rows, restarted,
                          scored.log_likelihood, scores)


def em_passes(max_iter: int, n_rows: int, coverage: float = 1.0) -> int:
    """The refinement's EM passes over ``n_rows`` rows: ``max_iter``, capped so that
    passes × rows ≤ :data:`EM_WORK` · min(1, ``coverage``) (never below
    :data:`EM_MIN_PASSES`). ``coverage``: the rows' share of the events the tree learned.
    Where the reservoirs hold a small sample of a long stream, the fit on the rows is the
    start of the leaves' sums' steps (:mod:`streammom.stream_sums`), which take the other
    events in by their share: passes to convergence on the sample bought nothing there —
    held-out ARI 0.825 either way on the engine's 2M-event stream, whose full refits at
    65,000–230,000 events (coverage 0.25–0.07) ran 52 passes and now 20 (BENCHMARKS.md "The
    growth burst belongs to a young stream").

    >>> em_passes(100, 4_096), em_passes(100, 16_384), em_passes(100, 16_384, coverage=0.25)
    (100, 50, 20)
    """
    work = EM_WORK * min(1.0, max(coverage, 0.0))
    return min(max_iter, max(EM_MIN_PASSES, int(work // max(n_rows, 1))))


def light_em_passes(max_iter: int, n_rows: int, coverage: float = 1.0) -> int:
    """A light refit's EM passes over ``n_rows`` rows before the sums' steps:
    min(``max_iter``, :data:`LIGHT_EM_PASSES`, ⌊:data:`LIGHT_EM_WORK` · min(1, coverage) /
    rows⌋), with no floor. While the reservoirs hold most of a stream, the light refits after the
    growth burst fit the rows as a full refit does: on the random-tree code streams of 30,000
    events at d = 3,000, EM from the stream's labels on all events labels at 0.92 × the
    oracle's ARI against 0.79 on a sample of 13,800 (BENCHMARKS.md "Removal moves, and EM in
    the light refits").
    Where they hold a small sample of a long stream, they stay the sums' steps alone, as cheap
    as the budget counts them (``refit_budget.LIGHT_REFIT_NODE_EVENTS``).

    >>> light_em_passes(100, 4_000), light_em_passes(100, 12_000), light_em_passes(
    ...     100, 16_384, coverage=0.1)
    (50, 17, 1)
    """
    work = LIGHT_EM_WORK * min(1.0, max(coverage, 0.0))
    return min(max_iter, LIGHT_EM_PASSES, int(work // max(n_rows, 1)))


def subtree_centre(means: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """A subtree's centre, one component standing for its leaves' (means (m, d), masses
    (m,)): Σ_l a_l μ_l / Σ_l a_l; the plain mean of the μ_l when every a_l is 0 (EM emptied
    the subtree; its share is then 0, and the router floors it), never 0/0.

    >>> subtree_centre(np.array([[0.2, 0.4], [0.6, 0.8]]), np.array([0.0, 0.0])).tolist()
    [0.4, 0.6000000000000001]
    """
    total = float(mass.sum())
    return mass @ means / total if total > 0 else means.mean(axis=0)


def _on_leaves(alt: MixtureEMResult, rows: sp.csr_array, row_weight: np.ndarray,
               label: np.ndarray, family: Family) -> MixtureEMResult:
    """A restart's fit with its components put on the leaves (:func:`match_components`)."""
    order = match_components(label, map_assign(rows, alt.means, alt.weights, family),
                             row_weight, alt.means.shape[0])
    return replace(alt, means=alt.means[order], weights=alt.weights[order])


def spectral_restart(rows: sp.csr_array, row_weight: np.ndarray, k: int, family: Family, *,
                     max_iter: int, tol: float, random_state: int) -> MixtureEMResult | None:
    """The flat k-component estimate of the weighted rows: ASVTD (thesis ch. 4 Alg. 2), the
    parameters mapped into the family's range, then EM (what :class:`SpectralMixture` fits).
    None when the rows do not support it: k above the number of rows or of columns they hold,
    or the moments undefined or of rank below k (documents too short for third-order moments).
    The decomposition runs on the columns the rows hold (:mod:`streammom.held_columns`: the
    centres vanish elsewhere), so its cost follows the rows' vocabulary, not d."""
    n, d = rows.shape
    held, cols = held_columns(rows)  # the moments vanish elsewhere (module held_columns)
    if k < 2 or k > min(n, cols.size):
        return None
    try:
        decomposition = asvtd(held, k, family, row_weight, random_state=random_state)
    except (ValueError, np.linalg.LinAlgError):  # rank < k, moments undefined (decompose.py)
        return None
    means, weights = family_range(scatter_rows(decomposition.centers, cols, d).T,
                                  decomposition.weights, family)
    return fit_mixture_em(rows, means, weights, family=family, tol=tol, max_iter=max_iter,
                          sample_weight=row_weight)


def match_components(label: np.ndarray, component: np.ndarray, row_weight: np.ndarray,
                     k: int) -> np.ndarray:
    """The component each of k leaves takes: the one-to-one assignment that maximises the row
    weight whose leaf and component agree, Σ_l overlap[l, order[l]] with overlap[l, j] =
    Σ_{i: label_i = l, component_i = j} w_i (Hungarian method,
    :func:`scipy.optimize.linear_sum_assignment`; deterministic).

    >>> match_components(np.array([0, 0, 1]), np.array([1, 1, 0]), np.ones(3), 2).tolist()
    [1, 0]
    """
    overlap = np.zeros((k, k))
    np.add.at(overlap, (label, component), row_weight)
    _, order = linear_sum_assignment(overlap, maximize=True)
    return order


def split_gain_rows(X: sp.csr_array, side: np.ndarray, family: Family) -> np.ndarray:
    """Each row's term of :func:`split_gain`: log π_{c_i} + log p(x_i | μ_{c_i}) − log p(x_i | μ)
    (all 0 when a side is empty: the split adds nothing)."""
    n = X.shape[0]
    sums, counts = partition_sums(X, np.ones(n), side, 2)
    if counts.min() == 0:
        return np.zeros(n)
    total = sums.sum(axis=0, keepdims=True)
    if family == "multinomial":
        den, den_all = sums.sum(axis=1), total.sum(axis=1)
    else:
        den, den_all = counts, np.array([float(n)])
    mu = sums / np.maximum(den, np.finfo(float).tiny)[:, None]
    mu_all = total / max(float(den_all[0]), np.finfo(float).tiny)
    two = log_likelihood_matrix(X, mu, counts / n, family)[np.arange(n), side]
    one = log_likelihood_matrix(X, mu_all, [1.0], family)[:, 0]
    return two - one


def split_gain(X: sp.csr_array, side: np.ndarray, family: Family, weight: float) -> float:
    """The log-likelihood a split adds, estimated on a node's reservoir rows ``X``:

    weight/n · Σ_i [log π_{c_i} + log p(x_i | μ_{c_i}) − log p(x_i | μ)], c_i = side of row i,

    with μ_c, π_c the mean and share of each side's rows and μ the mean of all rows (the
    classification likelihood of the 2-component model against 1; thesis eq. 4.1 / 3.4). The
    growth phase splits the leaf with the largest gain first, so a leaf budget goes to the
    leaves that hold more than one cluster rather than to the heaviest.
    """
    n = X.shape[0]
    if n == 0:
        return 0.0
    return float(weight / n * split_gain_rows(X, side, family).sum())


def gains_significantly(new_rows: np.ndarray, old_rows: np.ndarray, z: float) -> bool:
    """Whether one split's per-row gains (:func:`split_gain_rows`) beat another's on the same
    rows by a one-sided paired z-test: mean(δ) > z · sd(δ) / √n with δ_i = new_i − old_i.
    Two rows or fewer, or δ constant: the plain comparison mean(δ) > 0.

    >>> rng = np.random.default_rng(0)
    >>> old = rng.normal(size=1000)
    >>> gains_significantly(old + 0.5, old, 2.0), gains_significantly(old + 0.01, old - 0.01
    ...     + rng.normal(size=1000), 2.0)
    (True, False)
    """
    delta = np.asarray(new_rows, dtype=float) - np.asarray(old_rows, dtype=float)
    mean = float(delta.mean()) if delta.size else 0.0
    if delta.size <= 2:
        return mean > 0
    sd = float(delta.std(ddof=1))
    return bool(mean > z * sd / np.sqrt(delta.size)) if sd > 0 else mean > 0


def principal_bisection(split: Split, X: sp.csr_array, seed: int, n_iter: int = 30) -> Split:
    """``split`` re-routed by the sign of the rows' projection on the top principal axis of
    ``X`` (centred; power iteration from a seeded start, never forming the d × d covariance):
    the start of a 2-component EM when the moment split of a node is one-sided."""
    n, d = X.shape
    if n < 2:
        return split
    mean = np.asarray(X.sum(axis=0)).ravel() / n
    v = np.random.default_rng([seed, n, d]).standard_normal(d)
    for _ in range(n_iter):
        u = X @ v - mean @ v  # centred projections, (n,)
        v = X.T @ u - mean * u.sum()
        norm = float(np.linalg.norm(v))
        if norm == 0.0:
            return split
        v /= norm
    proj = X @ v
    cut = float(np.median(proj))
    router = Router(np.vstack([np.zeros(d), v]), np.array([0.0, -cut]), absolute=False)
    return replace(split, router=router)


def data_split(X: sp.csr_array, *, family: Family, seed: int, max_iter: int) -> Split | None:
    """A node's 2-way split found from its rows alone, for a node whose moments give none
    (M2 with fewer than two positive eigenvalues: the single-topic correction of short,
    proportional rows can leave one): the rows' principal bisection
    (:func:`principal_bisection`) as the start of a 2-component EM
    (:func:`~streammom.split.refine_split_em`, thesis ch. 6 §6.3), routed by MAP. It has no
    whitening or rotation; its discriminators are the router's weights and its quality says
    ``data_split`` = 1. None when the rows have no principal axis (fewer than 2, or all
    equal)."""
    d = X.shape[1]
    zeros = np.zeros((2, d))
    start = Split(router=Router(zeros, np.zeros(2), absolute=False), discriminators=zeros,
                  rotation=None, whitening=None, quality={"data_split": 1.0})
    bisected = principal_bisection(start, X, seed)
    if bisected is start:
        return None
    refined = refine_split_em(bisected, X, family=family, max_iter=max_iter)
    return replace(refined, discriminators=refined.router.weights.copy())
