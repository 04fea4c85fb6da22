"""The leaves' exact sums in the refinement's M-step: the events the reservoirs no longer hold.

The refinement's EM (:mod:`streammom.refine`) runs on the leaves' reservoir rows, at most
``reservoir_size`` a leaf. While a stream is short those rows *are* the stream; once it is
several times longer they are a sample, and the components they estimate carry the sample's
noise — at d = 2,000 features, 1,024 rows a leaf estimate a leaf's 2,000 rates poorly. Every
event, though, is in the leaves' sums: leaf l holds W_l (its weight) and s_l = Σ_i w_i x_i over
every event its router sent it (design §3), exact however long the stream.

So the M-step takes each leaf's reservoir rows for what they are, a share λ_l of its events,
and its sums for the rest (the events not in a reservoir, hard-assigned to the leaf the tree
routed them to, their mean estimated by the leaf's mean s_l / W_l):

    λ_l = min(1, R_l / W_l)    (R_l rows held by the leaf's reservoir, W_l its true weight)
    S_l = λ_l · Σ_i w_i r_il x_i + (1 − λ_l) · s_l,   N_l = λ_l · Σ_i w_i r_il + (1 − λ_l) · W_l
    μ_l = S_l / N_l (Bernoulli) or S_l / Σ_h S_lh (multinomial),   π_l ∝ N_l

with r_il the posteriors of the reservoir rows and w_i their weights (W_l / R_l each, as in the
refinement's EM). It is EM under a conjugate prior (Beta / Dirichlet) whose pseudo-counts are
the sums of the events outside the reservoirs: a MAP-EM step, the likelihood of the reservoir
rows plus the prior's log-density never decreasing. While every leaf's reservoir holds all the
events it was sent, λ = 1 and the fit is returned unchanged. A split's children start from a
share of their parent's reservoir, their sums that share scaled up, so after a split λ < 1 even
on a short stream; the step then moves the fit little (the sums are those rows' hard means).
On a long stream the sums weigh in proportion to the events they stand for.

The events outside the reservoirs are hard-assigned to the leaf the *tree* routed them to, so
the step is only sound for a fit whose components are the tree's partition: when the
refinement keeps a restart or a move that reorganised the components, the sums of leaf l
describe events of other clusters, and three steps pull the fit back towards the tree's
partition it left. So the sums join a fit only while the rows agree (at least
:data:`MIN_AGREEMENT` of their weight has its routed leaf as its MAP component). On R8's
token counts, whose restarted fits agree with the tree on 56–69 % of the rows, the last
refit of arrival order 2 kept an annealed fit that labelled all rows at 0.487 and the sums
turned it into 0.228; with the agreement test the five orders went 0.483 → 0.553 (mean),
every synthetic code stream and every binary real set within ±0.01 (BENCHMARKS.md "The
leaves' sums join only a fit that agrees with the tree"). In the study
behind this step (BENCHMARKS.md "Long and wide code streams", cause 2) the sums labelled
better than the reservoirs' EM wherever a stream was ≥ 2.4 reservoirs long (0.81 → 0.95 ×
the oracle's ARI at 50,000 events, d = 2,000).

The same holds leaf by leaf. A deep tree's routers each collapse a subtree into one component
(:func:`streammom.refine.subtree_centre`), so they disagree with the leaves' MAP on some leaves
much more than on others: on a 64-leaf code stream (100,000 events, d = 4,000) 85–91 % of the
rows agree overall while some leaves' routed rows are mostly other clusters', and each light
refit's steps pulled the fit towards the routers' partition (0.85 × the oracle's ARI at
27,000 events, 0.73 at the end). So a leaf's sums join only while its own routed rows agree
(:func:`leaf_agreement` ≥ :data:`MIN_AGREEMENT`); the other components take their rows alone
(0.82 at the end; BENCHMARKS.md "Many leaves").

The sums' purity. Agreeing rows are not enough when a leaf's sums were added up under other
routers than its reservoir rows: a re-split on a moved stream rebuilds its subtree from the
replaced leaves' reservoir rows (:mod:`streammom.refit`), so a rebuilt leaf's routed rows can
agree with the fit while its sums mix the events of two or three clusters (a half-sorted
16-cluster stream of 50,000 events: one rebuilt leaf of weight 9,769 held three clusters'
events, its rows agreed at 0.96, and the light refit's steps took the stream from 0.90 to
0.75 × the oracle's ARI). So the sums are also checked against the fit itself: the mean of
leaf l's sums is written as the closest non-negative combination of the fit's components
(:func:`sums_purity`), and the sums join only while leaf l's own component carries at least
:data:`MIN_AGREEMENT` of that combination; the other leaves' sums keep their place (the
half-sorted stream 0.87, BENCHMARKS.md "A leaf's sums kept out when its own component does
not explain them").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
from scipy.optimize import nnls

from streammom.estimators import Family
from streammom.mixture import MixtureEMResult, SumsPrior, fit_mixture_em, map_assign
from streammom.tree import Node

__all__ = ["MIN_AGREEMENT", "PURITY_CANDIDATES", "STREAM_SUM_STEPS", "leaf_agreement",
           "reservoir_shares", "sums_purity", "tree_agreement", "with_stream_sums"]

#: MAP-EM steps with the sums (each one E-step over the reservoir rows, O(nnz · k)).
STREAM_SUM_STEPS = 3
#: The sums join a fit only while at least this share of the rows' weight keeps its leaf as
#: its MAP component (module docstring): the tree's own fits measured 0.92–0.99 on the
#: synthetic code streams (one young 16-leaf tree 0.78), R8's restarted fits 0.56–0.69.
MIN_AGREEMENT = 0.8
#: Components a leaf's sums are explained by in :func:`sums_purity` (the nearest; all of
#: them up to this many leaves): k non-negative least squares of this size a refit.
PURITY_CANDIDATES = 32
#: The pooled rate below which a code's scale in :func:`sums_purity` stops growing.
PURITY_RATE_FLOOR = 1e-6


def tree_agreement(rows: sp.csr_array, row_weight: np.ndarray, fit: MixtureEMResult,
                   label: np.ndarray, family: Family) -> tuple[float, np.ndarray]:
    """Σ_i w_i [argmax_l p(l | x_i) = label_i] / Σ_i w_i: the weighted share of the rows
    whose MAP component under ``fit`` is the leaf the tree routed them to (``label``, an
    index into the leaves); and the same share leaf by leaf (:func:`leaf_agreement`).

    >>> from streammom.mixture import MixtureEMResult
    >>> fit = MixtureEMResult(np.array([[0.9, 0.1], [0.1, 0.9]]), np.array([0.5, 0.5]),
    ...                       0, True, 0.0)
    >>> X = sp.csr_array(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]))
    >>> overall, by_leaf = tree_agreement(X, np.ones(3), fit, np.array([0, 1, 1]), "bernoulli")
    >>> overall, by_leaf.tolist()
    (0.6666666666666666, [1.0, 0.5])
    """
    same = map_assign(rows, fit.means, fit.weights, family) == label
    overall = float(row_weight[same].sum() / row_weight.sum())
    return overall, leaf_agreement(same, label, row_weight, fit.means.shape[0])


def leaf_agreement(same: np.ndarray, label: np.ndarray, row_weight: np.ndarray, k: int
                   ) -> np.ndarray:
    """Each leaf's agreement with a fit: of the rows' weight the tree routed to leaf l
    (``label`` = l), the share whose MAP component under the fit is l (``same``); 1 for a leaf
    no row reached. The purity of the leaf's routing, which its sums of the events outside the
    reservoirs share.

    >>> leaf_agreement(np.array([True, False, True, True]), np.array([0, 0, 1, 1]),
    ...                np.ones(4), 3).tolist()
    [0.5, 1.0, 1.0]
    """
    routed = np.bincount(label, weights=row_weight, minlength=k)
    kept = np.bincount(label[same], weights=row_weight[same], minlength=k)
    return np.where(routed > 0, kept / np.maximum(routed, np.finfo(float).tiny), 1.0)


def sums_purity(fit: MixtureEMResult, leaves: Sequence[Node], family: Family) -> np.ndarray:
    """How much of each leaf's sums its own component of ``fit`` explains: the share
    a_ll / Σ_j a_lj of the non-negative combination of the fit's components closest to the
    mean of the leaf's sums (module docstring, "the sums' purity"); 1 for a leaf without
    weight.

    With μ_j the fit's components, p = Σ_j π_j μ_j its pooled rates and m_l = s_l / W_l
    (Bernoulli) or s_l / Σ_h s_lh (multinomial) the mean of leaf l's sums, each code scaled by
    1 / √p_h (its spread, so signature codes count beside the frequent ones):

        a_l = argmin_{a ≥ 0} Σ_h (Σ_j a_j μ_jh − m_lh)² / p_h        (non-negative least
                                                                        squares, Lawson–Hanson)

    solved in the k × k Gram form (Cholesky factor of the scaled components' Gram matrix), on
    the :data:`PURITY_CANDIDATES` components nearest the leaf's mean when k is larger.

    >>> from streammom.mixture import MixtureEMResult
    >>> from streammom.moments import MomentAccumulator
    >>> from streammom.reservoir import Reservoir
    >>> fit = MixtureEMResult(np.array([[0.9, 0.1], [0.1, 0.9]]), np.array([0.5, 0.5]),
    ...                       0, True, 0.0)
    >>> def leaf(weight, sums):
    ...     acc = MomentAccumulator(2)
    ...     acc.weight, acc.s = weight, np.array(sums)
    ...     return Node(0, -1, 0, acc, Reservoir(8, 2))
    >>> sums_purity(fit, [leaf(10.0, [9.0, 1.0]), leaf(10.0, [5.0, 5.0])], "bernoulli").round(2)
    array([1. , 0.5])
    """
    mu = np.asarray(fit.means, dtype=float)
    k = mu.shape[0]
    sums = np.vstack([v.acc.s for v in leaves]).astype(float)
    total = (sums.sum(axis=1) if family == "multinomial"
             else np.array([v.acc.weight for v in leaves], dtype=float))
    held = total > 0
    scale = 1.0 / np.sqrt(np.maximum(np.asarray(fit.weights, dtype=float) @ mu, PURITY_RATE_FLOOR))
    A = mu * scale
    G = A @ A.T
    # two equal components (or a component of zeros): still factorable
    G += np.eye(k) * max(1e-9 * np.trace(G) / k, np.finfo(float).tiny)
    B = A @ (sums / np.where(held, total, 1.0)[:, None] * scale).T  # column l: A m_l
    near = B / np.sqrt(np.diag(G))[:, None]  # cosine-like closeness of m_l to each μ_j
    purity = np.ones(k)
    every = np.arange(k)
    whole = np.linalg.cholesky(G) if k <= PURITY_CANDIDATES else None  # one factor for all
    for leaf in np.flatnonzero(held):
        if whole is not None:
            cand, chol = every, whole
        else:
            others = np.delete(every, leaf)
            top = others[np.argsort(-near[others, leaf], kind="stable")[:PURITY_CANDIDATES - 1]]
            cand = np.sort(np.append(top, leaf))
            chol = np.linalg.cholesky(G[np.ix_(cand, cand)])
        a, _ = nnls(chol.T, np.linalg.solve(chol, B[cand, leaf]))
        own = a[np.searchsorted(cand, leaf)]
        purity[leaf] = own / a.sum() if a.sum() > 0 else 1.0
    return purity


def reservoir_shares(leaves: Sequence[Node], weight_scale: float = 1.0) -> np.ndarray:
    """λ_l = min(1, R_l / W_l) of every leaf (``weight_scale`` turns stored weights into true,
    decayed ones); 1 for a leaf without weight.

    >>> from streammom.moments import MomentAccumulator
    >>> from streammom.reservoir import Reservoir
    >>> def leaf(weight, rows):
    ...     acc, res = MomentAccumulator(2), Reservoir(64, 2)
    ...     acc.weight = weight
    ...     res.n_filled = rows
    ...     return Node(0, -1, 0, acc, res)
    >>> reservoir_shares([leaf(40.0, 10), leaf(8.0, 8), leaf(0.0, 0)]).tolist()
    [0.25, 1.0, 1.0]
    """
    rows = np.array([len(v.reservoir) for v in leaves], dtype=float)
    weight = np.array([v.acc.weight for v in leaves], dtype=float) * weight_scale
    return np.where(weight > 0, np.minimum(1.0, rows / np.maximum(weight, 1e-300)), 1.0)


def with_stream_sums(rows: sp.csr_array, row_weight: np.ndarray, fit: MixtureEMResult,
                     leaves: Sequence[Node], family: Family, *, weight_scale: float = 1.0,
                     steps: int = STREAM_SUM_STEPS, label: np.ndarray | None = None,
                     shrink: bool = False) -> MixtureEMResult:
    """``fit`` (its components on ``leaves``, in order) after ``steps`` MAP-EM steps with the
    leaves' sums (module docstring: :func:`streammom.mixture.fit_mixture_em` with the sums as
    a :class:`~streammom.mixture.SumsPrior`); ``fit`` itself when every λ_l is 1, or when
    ``label`` (each row's leaf under the tree's routers) is given and the fit agrees with it
    on less than :data:`MIN_AGREEMENT` of the rows' weight; with ``label``, a leaf whose own
    rows agree on less than that (:func:`leaf_agreement`), or whose sums its own component
    explains less than that (:func:`sums_purity`), keeps its sums out (λ_l taken as 1: its
    rows alone). ``rows`` and ``row_weight`` are
    the refinement's (the leaves' reservoirs, stacked in leaf order); ``shrink``: the steps
    also shrink the rates toward the pooled ones (:mod:`streammom.shrinkage`, code sets) with
    the fit's own prior strengths when it has them; the result keeps
    ``fit``'s diagnostics (its EM's log-likelihood on the rows)."""
    share = reservoir_shares(leaves, weight_scale)
    if (share >= 1.0).all() or steps < 1:
        return fit
    if label is not None:
        overall, by_leaf = tree_agreement(rows, row_weight, fit, label, family)
        if overall < MIN_AGREEMENT:
            return fit
        kept_out = (by_leaf < MIN_AGREEMENT) | (sums_purity(fit, leaves, family) < MIN_AGREEMENT)
        share = np.where(kept_out, 1.0, share)
        if (share >= 1.0).all():
            return fit
    prior = SumsPrior(sums=np.vstack([v.acc.s for v in leaves]),
                      mass=np.array([v.acc.weight for v in leaves], dtype=float), share=share)
    # tol 0: exactly ``steps`` M-steps, each one compiled E-step walk over the rows
    tau = fit.prior_strengths  # a shrunk fit's τ carries on (none estimated in 3 steps)
    summed = fit_mixture_em(rows, fit.means, fit.weights, family=family, tol=0.0,
                            max_iter=steps, sample_weight=row_weight, prior=prior,
                            shrink=tau if shrink and tau is not None else shrink)
    return replace(fit, means=summed.means, weights=summed.weights)
