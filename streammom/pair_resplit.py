"""Pair re-splits: a local search step for the refinement's mixture, two components at a time.

EM from the tree's partition stops at a local optimum. On the synthetic code streams with many
features (d = 1,000–3,000, 8–16 leaves) the optimum it stops at is wrong mostly *between
siblings*: two components that share most of their profile split their joint rows along a
boundary that is not theirs, and EM cannot move it (the rows of both are confused together).
For each such pair this step fits the two components again from a start that does not depend
on the current boundary, and keeps the new pair when it explains the pair's rows better.

**The start: the pair's between-component covariance** (the second-order method of moments,
as in the moment splits; thesis ch. 3, digest part 1 §2). For the rows of a two-component
mixture of product distributions, with a row statistic M_i whose expectation is μ_z μ_zᵀ and a
mean m_i whose expectation is μ_z (z the row's component),

    B = Σ_i w̃_i M_i − m̄ m̄ᵀ,   m̄ = Σ_i w̃_i m_i   ⇒   E[B] = π₀ π₁ (μ₀ − μ₁)(μ₀ − μ₁)ᵀ,

rank one, its top eigenvector the direction that separates the two. The statistics:

* Bernoulli (binary rows): M_i = x_i x_iᵀ − diag(x_i), m_i = x_i: the off-diagonal of the
  covariance. Its diagonal holds the within-component variances, which a plain principal axis
  (:func:`streammom.refine.principal_bisection`) mixes in: on the wide code streams of
  BENCHMARKS.md ("Long and wide code streams", cause 1) the principal axis's starts ended less
  likely than these on every sibling pair tried.
* Multinomial (counts, length t_i ≥ 2): M_i = (x_i x_iᵀ − diag(x_i)) / (t_i (t_i − 1)),
  m_i = x_i / t_i, unbiased for μ_z μ_zᵀ and μ_z under the multinomial; rows of one token
  carry no second-order information and get weight 0 in B.

B is never formed: its product with a vector is O(nnz) (Xᵀ(s ∘ w̃ ∘ (X v)) − Xᵀ(w̃ ∘ s) ∘ v
− m̄ (m̄ · v), plus diag(m̄²) v for Bernoulli), and its top eigenvector comes from Lanczos with a
seeded start (:func:`streammom.decompose.top_eigenpairs`). The pair's rows go to the two sides
by the sign of their centred projection, and a two-component EM
(:func:`streammom.mixture.fit_mixture_em`) runs from that partition and, on the same rows,
from their current one.

**The step** (one round per refit; successive refits continue the search):

1. posteriors R of the current fit on the rows; the pairs are the most confused components:
   overlap O_ab = Σ_i w_i r_ia r_ib / √(Σ_i w_i r_ia² · Σ_i w_i r_ib²), taken greedily in
   decreasing order, each component in at most one pair (the merge criterion of split-and-
   merge EM, Ueda, Nakano, Ghahramani & Hinton 2000, eq. 8);
2. for each pair, the rows whose MAP component is one of the two: the new pair replaces the
   old one when it is the better fit of those rows; its shares are scaled to the pair's
   total share;
3. when some pair was replaced, EM on all the rows from the new parameters; the result is
   kept only if it is the better fit of all the rows (same rows, same weights).

"Better" (:func:`streammom.evidence.better_fit`): for code sets, the partition of higher
evidence: a re-split that cuts a heavy cluster in two and
merges two light ones is often the more likely fit, even net of its optimism, and the less
evident one (:mod:`streammom.evidence`; on a 50,000-event code stream of skewed shares the
re-splits judged by the likelihood took the refit of 5,000 events from 0.87 to 0.73 ARI on
its rows, BENCHMARKS.md "Fits compared by the evidence of their partition"); for token
counts, the weighted log-likelihood net of each fit's optimism
(:func:`streammom.mixture.more_likely`, TIC).

The refinement applies it to code sets (Bernoulli) only. On R8's token counts the more likely
pairs it found labelled two of five arrival orders worse (ARI 0.555 → 0.453, 0.620 → 0.432;
BENCHMARKS.md "Long and wide code streams"): documents mix topics, so two confused
components are rarely two clusters the labels know. Both statistics are implemented and
tested.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streammom.decompose import top_eigenpairs
from streammom.estimators import Family
from streammom.evidence import EvidenceCache, better_fit
from streammom.held_rates import on_few_held_columns
from streammom.mixture import (
    MixtureEMResult,
    fit_from_partition,
    fit_mixture_em,
    map_assign,
    responsibilities,
)

__all__ = ["MIN_PAIR_ROWS", "between_direction", "confused_pairs", "pair_resplit"]

#: A pair with fewer rows than this is left as it is.
MIN_PAIR_ROWS = 8
_EIG_TOL = 1e-4
_EIG_FLOOR = 1e-9  # of ‖m̄‖²: a top eigenvalue below it is round-off (one component)


def between_direction(rows: sp.csr_array, row_weight: np.ndarray, family: Family, *,
                      random_state: int = 0) -> np.ndarray | None:
    """Each row's centred projection on the top eigenvector of the rows' between-component
    covariance B (module docstring); None when B has no positive direction (one component,
    or no row with second-order information). B is zero in the rows and columns of the codes
    no row holds, so when they hold at most :data:`~streammom.held_rates.HELD_SHARE` of d the
    Lanczos solve runs on the held columns (:mod:`streammom.held_columns`), from the same
    start vector's entries there.

    >>> X = sp.csr_array(np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1],
    ...                            [0, 0, 1, 1.]]))
    >>> p = between_direction(X, np.ones(4), "bernoulli")
    >>> bool(p[0] * p[2] < 0 and np.isclose(p[0], p[1]) and np.isclose(p[2], p[3]))
    True
    """
    n, d = rows.shape
    start = np.random.default_rng(random_state).uniform(0.5, 1.5, size=d)  # Lanczos' v0
    rows, cols = on_few_held_columns(rows)
    if cols is not None:  # B vanishes on the columns no row holds: work on the rest
        d, start = cols.size, start[cols]
    if family == "multinomial":
        t = np.asarray(rows.sum(axis=1)).ravel()
        scale = np.where(t >= 2, 1.0 / np.maximum(t * (t - 1), 1.0), 0.0)
        freq = 1.0 / np.maximum(t, np.finfo(float).tiny)
    else:
        scale = np.ones(n)
        freq = np.ones(n)
    w = row_weight / row_weight.sum()
    informative = float(w[scale > 0].sum())  # the rows with second-order information
    if informative <= 0:
        return None
    ws = w * scale / informative
    m_bar = rows.T @ (w * freq)
    diag_m = rows.T @ ws  # Σ_i w̃_i s_i x_i: the diag(x_i) term (x_ih² = x_ih for binary rows)
    if family == "multinomial":
        # E[x xᵀ − diag(x)] already excludes the diagonal's within-component term
        def matvec(v: np.ndarray) -> np.ndarray:
            v = np.ravel(v)
            return rows.T @ (ws * (rows @ v)) - diag_m * v - m_bar * (m_bar @ v)
    else:
        def matvec(v: np.ndarray) -> np.ndarray:
            v = np.ravel(v)
            return (rows.T @ (ws * (rows @ v)) - diag_m * v - m_bar * (m_bar @ v)
                    + m_bar * m_bar * v)
    if d == 0:  # the rows hold no code
        return None
    # Lanczos needs two columns or more (ARPACK: k < d); one held column is B itself, 1 × 1
    op = (spla.LinearOperator((d, d), matvec=matvec, dtype=float) if d > 1
          else matvec(np.ones(1)).reshape(1, 1))
    try:
        values, vectors = top_eigenpairs(op, 1, tol=_EIG_TOL, v0=start)
    except (ValueError, spla.ArpackError):
        return None
    if not values[0] > _EIG_FLOOR * float(m_bar @ m_bar):  # no direction above round-off
        return None
    u = vectors[:, 0]
    centre = m_bar @ u
    projection = (rows @ u) * freq if family == "multinomial" else rows @ u
    return projection - centre


def _kept_places(rows: sp.csr_array, row_weight: np.ndarray, new: MixtureEMResult,
                 was_second: np.ndarray, family: Family) -> list[int]:
    """[0, 1], or [1, 0] when the new pair's second component holds more of the weight of
    the rows that were the first's (so each component stays on the leaf most of its rows
    were on)."""
    second = map_assign(rows, new.means, new.weights, family) == 1
    kept = row_weight[second == was_second].sum()
    return [0, 1] if kept >= row_weight[second != was_second].sum() else [1, 0]


def confused_pairs(resp: np.ndarray, row_weight: np.ndarray) -> list[tuple[int, int]]:
    """Disjoint pairs of components, most confused first (module docstring, step 1).

    >>> R = np.array([[0.5, 0.5, 0.0], [0.6, 0.4, 0.0], [0.0, 0.1, 0.9]])
    >>> confused_pairs(R, np.ones(3))
    [(0, 1)]
    """
    k = resp.shape[1]
    gram = resp.T @ (resp * row_weight[:, None])
    norm = np.sqrt(np.maximum(np.diag(gram), np.finfo(float).tiny))
    overlap = gram / np.outer(norm, norm)
    upper = np.triu_indices(k, 1)
    order = np.argsort(-overlap[upper], kind="stable")
    used: set[int] = set()
    pairs: list[tuple[int, int]] = []
    for idx in order.tolist():
        a, b = int(upper[0][idx]), int(upper[1][idx])
        if overlap[a, b] <= 0 or a in used or b in used:
            continue
        pairs.append((a, b))
        used.update((a, b))
    return pairs


def pair_resplit(rows: sp.csr_array, row_weight: np.ndarray, fit: MixtureEMResult,
                 family: Family, *, max_iter: int, tol: float, random_state: int = 0,
                 cache: EvidenceCache | None = None) -> MixtureEMResult:
    """One round of pair re-splits of ``fit`` on the weighted ``rows`` (module docstring):
    the better fit (:func:`streammom.evidence.better_fit`), ``fit`` itself when no re-split
    gains. Its components stay in their places (a re-split pair keeps the two indices it
    had), so they stay on their leaves. ``cache``: an evidence cache made for these ``rows``
    and ``row_weight``, shared with the refit's other comparisons (a fresh one when None).
    Deterministic (the Lanczos starts are seeded by ``random_state`` and the pair)."""
    k = fit.means.shape[0]
    if k < 2:
        return fit
    resp = responsibilities(rows, fit.means, fit.weights, family)
    label = resp.argmax(axis=1)
    means, weights = fit.means.copy(), fit.weights.copy()
    replaced = False
    for a, b in confused_pairs(resp, row_weight):
        members = np.flatnonzero((label == a) | (label == b))
        if members.size < MIN_PAIR_ROWS:
            continue
        sub, sub_weight = rows[members], row_weight[members]
        projection = between_direction(sub, sub_weight, family,
                                       random_state=random_state * 7919 + a * k + b)
        if projection is None:
            continue
        side = (projection > 0).astype(np.int64)
        if side.min() == side.max():
            continue
        current = fit_from_partition(sub, sub_weight, (label[members] == b).astype(np.int64),
                                     2, family=family, max_iter=max_iter, tol=tol)
        new = fit_from_partition(sub, sub_weight, side, 2, family=family, max_iter=max_iter,
                                 tol=tol)
        if better_fit(new, current, family, EvidenceCache(sub, sub_weight),
                      net_of_optimism=True):
            order = _kept_places(sub, sub_weight, new, label[members] == b, family)
            means[[a, b]] = new.means[order]
            weights[[a, b]] = new.weights[order] * (weights[a] + weights[b])
            replaced = True
    if not replaced:
        return fit
    out = fit_mixture_em(rows, means, weights, family=family, tol=tol, max_iter=max_iter,
                         sample_weight=row_weight)
    if cache is None:
        cache = EvidenceCache(rows, row_weight)
    return out if better_fit(out, fit, family, cache, net_of_optimism=True) else fit
