"""Empirical-Bayes shrinkage of a Bernoulli mixture's rates toward the pooled rates.

A component fitted to few events estimates each of its d rates from a handful of codes, and
most of those rates carry no cluster signal at all: on code sets most codes are background,
as common in every cluster. Maximum likelihood spends the sample's noise on them, and on short
streams EM's optimum labels worse than the true parameters by much more than its search
misses (BENCHMARKS.md "Shrinkage toward the pooled rates").

Model (a hierarchical Beta–Bernoulli mixture; Gelman et al., *Bayesian Data Analysis*, 3rd
ed., §5.3, the rat-tumour example): the rate of code h in component j is drawn
μ_jh ~ Beta(τ_h m_h, τ_h (1 − m_h)), m_h the pooled rate of code h over all rows and τ_h its
prior strength in pseudo-events, one per code. Given a component's (expected) statistics
S_jh = Σ_i w_i r_ij x_ih and N_j = Σ_i w_i r_ij, the code's marginal likelihood over the k
components is the Beta–binomial product

    p(S_·h | τ_h) = Π_j B(τ_h m_h + S_jh, τ_h (1 − m_h) + N_j − S_jh) / B(τ_h m_h, τ_h (1 − m_h))

(the binomial coefficients do not depend on τ_h). Type-II maximum likelihood (empirical Bayes,
*BDA* §5.3) picks τ_h = argmax p(S_·h | τ) over :data:`TAU_RANGE` (log scale): a code whose
k rates agree with one pooled rate takes the top of the grid (fully pooled), a signature code
that tells the components apart a small τ_h (its rates stay the data's). The M-step is then
the posterior mean

    μ_jh = (S_jh + τ_h m_h) / (N_j + τ_h)

which is the MAP under Beta(τ_h m_h + 1, τ_h (1 − m_h) + 1), so for fixed τ each EM step
raises the rows' log-likelihood plus that prior's log-density (Dempster, Laird & Rubin 1977
§4.3, MAP-EM). The EM re-estimates τ at the M-steps of :data:`TAU_STEPS`
(:func:`streammom.mixture.fit_mixture_em` ``shrink=True``).

On the 300-event code streams of ``bench/short_streams.py`` (d = 500, 8 leaves) the
shrinkage takes the labels from 0.75 to 0.86 × the oracle's ARI; at 1,000 events from 0.96 to
0.98 (BENCHMARKS.md). The more events a component holds, the less any τ moves it.

Strengths pulled together (:func:`pulled_prior_strengths`): one level more, each log₁₀ τ_h
drawn around a common log₁₀ τ₀ (:func:`common_prior_strength`, the same search with one τ
shared by all the codes). The refinement's last step polishes a code set's scores with them
(:mod:`streammom.refine`): a rare code's own τ_h comes from the one or two components that
hold it and is often small, so its rate stays high in the component that happens to hold it
and the labels follow the sample's rare codes; pulled toward τ₀ it pools like the others,
while a code whose counts pin its strength keeps it (BENCHMARKS.md "Prior strengths pulled
toward a common one"). The search keeps each code's own τ_h: started from anything but the
truth, EM with one common τ labels worse (300-event code streams 10 → 1 of 26 at ≥ 0.9 × the
oracle's ARI).

Bernoulli only: token counts (multinomial) keep the maximum-likelihood M-step.
"""

from __future__ import annotations

import numpy as np
from scipy.special import betaln

from streammom.shares_prior import labels_log_prior

__all__ = ["PULL_DECADES", "TAU_RANGE", "TAU_STEPS", "common_prior_strength",
           "partition_evidence", "pooled_rates", "prior_strengths", "pulled_prior_strengths",
           "shrunk_rates", "type_two_prior"]

#: The search's range of prior strengths τ (pseudo-events), 0.1 to 10⁵: the top is "fully
#: pooled" for any component a stream's refit holds.
TAU_RANGE = (0.1, 1e5)
#: The search's steps in log₁₀ τ: every decade of the range, then half and quarter decades
#: around the best (:func:`prior_strengths`).
_REFINE_STEPS = (0.5, 0.25)
#: M-steps of a shrunk EM at which τ is estimated again: the first, then at gaps that double
#: (the partition moves most in the first steps; BENCHMARKS.md "Shrinkage toward the pooled
#: rates" compares this with an estimate at every step).
TAU_STEPS = frozenset({0, 5, 15, 35, 75, 155})
_RATE_CLIP = 1e-9
#: σ of the hyperprior on log₁₀ τ_h around the common strength, in decades
#: (:func:`pulled_prior_strengths`): 1 keeps DNA's signature positions at their own strengths
#: (0.5: 0.77 → 0.74 ARI) and pulls the ICD streams' rare codes (BENCHMARKS.md "Prior
#: strengths pulled toward a common one").
PULL_DECADES = 1.0


def pooled_rates(S: np.ndarray, N: np.ndarray) -> np.ndarray:
    """m_h = Σ_j S_jh / Σ_j N_j: the rate of every code over all rows (the EM's expected
    statistics sum over the components to the rows' own weighted sums, so m is the same at
    every step of a plain EM; with the leaves' sums' pseudo-counts, whose weight in each
    component depends on its share, it moves a little with the responsibilities).

    >>> pooled_rates(np.array([[3.0, 0.0], [1.0, 2.0]]), np.array([4.0, 4.0])).tolist()
    [0.5, 0.25]
    """
    return S.sum(axis=0) / max(float(N.sum()), np.finfo(float).tiny)


def _log_marginal(log_tau: np.ndarray, S: np.ndarray, N: np.ndarray, m: np.ndarray
                  ) -> np.ndarray:
    """log p(S_·h | τ_h) up to a constant in τ (module docstring) for candidate log₁₀ τ
    ``log_tau`` (c, h): (c, h). One component at a time, so temporaries stay (c, h).

    A component that holds none of code h (S_jh = 0: most entries on a wide vocabulary of rare
    codes) adds log B(a_h, b_h + N_j), a_h = τ m_h and b_h = τ (1 − m_h), which depends on the
    code only through its candidate pair (log₁₀ τ, m_h). Those terms are evaluated once per
    distinct pair (:func:`_distinct_pairs`; rare codes share a few pooled rates, and the
    search's candidates a few strengths) and gathered, the entries the component holds as they
    are: the same arguments give the same values, added in the same order, so the result is
    the direct evaluation's bit for bit, with fewer log B — a component's shared terms are used
    when the distinct pairs and its held entries together number fewer than the (c, h) block
    (a 64-leaf stream's young refits at d = 4,000: 63 % of the entries are zeros, 14 % of the
    candidates distinct).
    """
    tau = 10.0 ** log_tau
    a, b = tau * m, tau * (1.0 - m)
    out = -N.shape[0] * betaln(a, b)
    c = out.shape[0]
    first, inverse = _distinct_pairs(log_tau, m, out.shape)
    a_u, b_u = a.ravel()[first], b.ravel()[first]
    for S_j, N_j in zip(S, N, strict=True):
        held = np.flatnonzero(S_j)
        if first.size + c * held.size >= out.size:  # sharing saves nothing: all directly
            out += betaln(a + S_j, b + (N_j - S_j))
            continue
        term = betaln(a_u, b_u + N_j)[inverse].reshape(out.shape)
        S_held = S_j[held]
        term[:, held] = betaln(a[:, held] + S_held, b[:, held] + (N_j - S_held))
        out += term
    return out


def _distinct_pairs(log_tau: np.ndarray, m: np.ndarray, shape: tuple[int, ...]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (log₁₀ τ, m_h) pairs of the (c, h) candidates ``log_tau`` over the codes'
    pooled rates ``m`` (h,): (the flat index of each pair's first entry, each entry's pair),
    by :func:`_distinct_columns`.

    >>> first, inverse = _distinct_pairs(np.array([[0.0, 0.0, 1.0]]), np.array([0.2, 0.2, 0.2]),
    ...                                  (1, 3))
    >>> first.tolist(), inverse.tolist()
    ([0, 2], [0, 0, 1])
    """
    lt = np.broadcast_to(log_tau, shape).ravel()
    mm = np.broadcast_to(m, shape).ravel()
    return _distinct_columns(np.vstack([lt, mm]))


def _distinct_columns(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct columns of ``keys`` (r, n): (the index of each one's first column, each
    column's distinct one), numbered in lexicographic order. O(r n log n) by one
    lexicographic sort (stable: the first column is the lowest index).

    >>> first, inverse = _distinct_columns(np.array([[2.0, 1.0, 2.0], [0.0, 5.0, 0.0]]))
    >>> first.tolist(), inverse.tolist()
    ([1, 0], [1, 0, 1])
    """
    order = np.lexsort(keys[::-1])
    ranked = keys[:, order]
    starts = np.ones(order.size, dtype=bool)
    starts[1:] = (ranked[:, 1:] != ranked[:, :-1]).any(axis=0)
    inverse = np.empty(order.size, dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return order[starts], inverse


def prior_strengths(S: np.ndarray, N: np.ndarray, m: np.ndarray) -> np.ndarray:
    """τ_h maximising the Beta–binomial marginal likelihood of code h's statistics over the
    components (module docstring), for every code h; (d,). The search (vectorised over codes)
    evaluates every decade of :data:`TAU_RANGE`, then moves each code's best by half and by
    quarter decades while the marginal rises (ties stay): 11 evaluations a code. Codes no
    row holds (m_h = 0) take the top of the range (their rates are 0 whatever τ). Cost
    O(11 · k · d_held) evaluations of log B.

    >>> S = np.array([[8.0, 2.0], [0.0, 2.0]]); N = np.array([10.0, 10.0])
    >>> tau = prior_strengths(S, N, pooled_rates(S, N))
    >>> bool(tau[0] < 1.0), bool(tau[1] == TAU_RANGE[1])  # a signature code, a background one
    (True, True)
    """
    return _type_two(S, N, m)[0]


def _type_two(S: np.ndarray, N: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, float]:
    """(τ, Σ_h max_τ log p(S_·h | τ)): :func:`prior_strengths`' search, and the sum over the
    held codes of the marginals it reached (:func:`partition_evidence`'s codes' term)."""
    lo, hi = np.log10(TAU_RANGE)
    tau = np.full(S.shape[1], TAU_RANGE[1])
    codes = _held_codes(S, N, m)
    if codes is None:
        return tau, 0.0
    held, mh, Sh, inverse = codes
    decades = np.arange(lo, hi + 0.5)[:, None] * np.ones((1, mh.size))
    marginal = _log_marginal(decades, Sh, N, mh)
    top = np.argmax(marginal, axis=0)
    cols = np.arange(mh.size)
    best, best_value = decades[top, cols], marginal[top, cols]
    for step in _REFINE_STEPS:
        for sign in (-1.0, 1.0):
            candidate = np.clip(best + sign * step, lo, hi)
            value = _log_marginal(candidate[None, :], Sh, N, mh)[0]
            better = value > best_value
            best = np.where(better, candidate, best)
            best_value = np.where(better, value, best_value)
    tau[held] = 10.0 ** best[inverse]
    return tau, float(best_value[inverse].sum())


def type_two_prior(S: np.ndarray, N: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(held, a, b, τ, codes): the codes some row holds (m_h > 0) and, for each, the
    Beta(a_h, b_h) prior the evidence integrates its rates under, a_h = τ_h m_h and
    b_h = τ_h (1 − m_h) at its type-II strength τ_h (:func:`prior_strengths`) and pooled rate
    m_h clipped as the τ search clips it; ``codes`` is :func:`partition_evidence`'s codes'
    term, the Beta–binomial marginals under exactly these priors
    (:mod:`streammom.evidence_ascent` moves rows by their differences).

    >>> S = np.array([[8.0, 2.0, 0.0], [0.0, 2.0, 0.0]]); N = np.array([10.0, 10.0])
    >>> held, a, b, tau, codes = type_two_prior(S, N)
    >>> held.tolist(), bool(np.allclose(a + b, tau)), codes == partition_evidence(S, N, 1e6) - (
    ...     labels_log_prior(N, 1e6))
    ([0, 1], True, True)
    """
    m = pooled_rates(S, N)
    held = np.flatnonzero(m > 0)
    tau, codes = _type_two(S, N, m)
    mh = np.clip(m[held], _RATE_CLIP, 1.0 - _RATE_CLIP)
    return held, tau[held] * mh, tau[held] * (1.0 - mh), tau[held], codes


def _held_codes(S: np.ndarray, N: np.ndarray, m: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """What the τ searches evaluate: (the held codes' indices, the distinct columns' pooled
    rates (clipped) and statistics (clipped to their masses), each held code's distinct
    column) — :func:`_distinct_codes` of the codes with m_h > 0 — or None when no row holds
    a code."""
    held = np.flatnonzero(m > 0)
    if held.size == 0:
        return None
    mh = np.clip(m[held], _RATE_CLIP, 1.0 - _RATE_CLIP)
    Sh = np.clip(S[:, held], 0.0, N[:, None])  # (k, h); rounding can put a sum past its mass
    return (held, *_distinct_codes(mh, Sh))


def _common_log_strength(mh: np.ndarray, Sh: np.ndarray, N: np.ndarray, inverse: np.ndarray
                         ) -> float:
    """log₁₀ τ₀ of :func:`common_prior_strength` from :func:`_held_codes`' distinct columns:
    every decade of :data:`TAU_RANGE`, then half and quarter decades while the summed marginal
    rises, each distinct column counted as often as it occurs."""
    lo, hi = np.log10(TAU_RANGE)
    counts = np.bincount(inverse, minlength=mh.size).astype(float)

    def summed(log_tau: float) -> float:
        return float(_log_marginal(np.full((1, mh.size), log_tau), Sh, N, mh)[0] @ counts)

    decades = np.arange(lo, hi + 0.5)
    values = [summed(x) for x in decades]
    best, best_value = float(decades[int(np.argmax(values))]), max(values)
    for step in _REFINE_STEPS:
        for sign in (-1.0, 1.0):
            candidate = float(np.clip(best + sign * step, lo, hi))
            value = summed(candidate)
            if value > best_value:
                best, best_value = candidate, value
    return best


def common_prior_strength(S: np.ndarray, N: np.ndarray, m: np.ndarray) -> np.ndarray:
    """One τ for every code: the type-II maximum of Σ_h log p(S_·h | τ) over the held codes
    (module docstring), by :func:`prior_strengths`' search — every decade of
    :data:`TAU_RANGE`, then half and quarter decades while the sum rises — on the summed
    marginals instead of each code's; (d,), every entry that τ. Each distinct column of
    statistics is evaluated once and counted as often as it occurs. Cost O(11 · k · d_held).

    >>> S = np.array([[8.0, 2.0, 5.0], [0.0, 2.0, 5.0]]); N = np.array([10.0, 10.0])
    >>> tau = common_prior_strength(S, N, pooled_rates(S, N))
    >>> bool(np.all(tau == tau[0])), bool(tau[0] < prior_strengths(S, N, pooled_rates(S, N))[1])
    (True, True)
    """
    codes = _held_codes(S, N, m)
    if codes is None:
        return np.full(S.shape[1], TAU_RANGE[1])
    _, mh, Sh, inverse = codes
    return np.full(S.shape[1], 10.0 ** _common_log_strength(mh, Sh, N, inverse))


def pulled_prior_strengths(S: np.ndarray, N: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Each code's τ_h under a hyperprior that pulls it toward the common strength τ₀
    (:func:`common_prior_strength`): the maximum over quarter decades of :data:`TAU_RANGE` of

        log p(S_·h | τ) − (log₁₀ τ − log₁₀ τ₀)² / (2 σ²),    σ = :data:`PULL_DECADES`,

    the type-II posterior mode of a hierarchical model whose log-strengths are Normal around
    their common value (*BDA* §5.3 with one level more). A code whose counts pin its marginal
    down (a frequent signature or background code) keeps about its own τ_h; a rare code,
    whose marginal is nearly flat, takes about τ₀. (d,); codes no row holds take the top of
    the range, as in :func:`prior_strengths`. Cost O(25 · k · d_held).

    >>> S = np.array([[8.0, 1.0, 50.0], [0.0, 0.0, 50.0]]); N = np.array([10.0, 100.0])
    >>> m = pooled_rates(S, N)
    >>> own, pulled = prior_strengths(S, N, m), pulled_prior_strengths(S, N, m)
    >>> tau0 = common_prior_strength(S, N, m)[0]
    >>> bool(abs(np.log10(pulled[1] / tau0)) < abs(np.log10(own[1] / tau0)))  # a rare code
    True
    """
    tau = np.full(S.shape[1], TAU_RANGE[1])
    codes = _held_codes(S, N, m)
    if codes is None:
        return tau
    held, mh, Sh, inverse = codes
    x0 = _common_log_strength(mh, Sh, N, inverse)
    lo, hi = np.log10(TAU_RANGE)
    grid = np.arange(lo, hi + 0.01, 0.25)[:, None] * np.ones((1, mh.size))
    objective = (_log_marginal(grid, Sh, N, mh)
                 - (grid - x0) ** 2 / (2.0 * PULL_DECADES ** 2))
    best = grid[np.argmax(objective, axis=0), np.arange(mh.size)]
    tau[held] = 10.0 ** best[inverse]
    return tau


def _distinct_codes(m: np.ndarray, S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct columns of the codes' pooled rates ``m`` (h,) over their statistics ``S``
    (k, h), and each code's column among them (``inverse``): codes with equal statistics have
    equal marginals at every τ, so the search evaluates each distinct column once and gives
    every code its own column's result, exactly (the sums then run over the codes in order, so
    the evidence is bit-identical). On a wide vocabulary of rare codes most codes are seen once
    or twice, in the same few patterns: 1,660 codes held a refit's rows on average and 486
    distinct columns at d = 50,000 (BENCHMARKS.md "The evidence on the columns the rows
    hold"). O(k · h log h) by one lexicographic sort (:func:`_distinct_columns`).

    >>> m, S, inverse = _distinct_codes(np.array([0.1, 0.2, 0.1]),
    ...                                 np.array([[1.0, 2.0, 1.0], [0.0, 0.0, 0.0]]))
    >>> m.tolist(), S.tolist(), inverse.tolist()
    ([0.1, 0.2], [[1.0, 2.0], [0.0, 0.0]], [0, 1, 0])
    """
    first, inverse = _distinct_columns(np.vstack([S, m[None, :]]))
    return m[first], S[:, first], inverse


def shrunk_rates(S: np.ndarray, N: np.ndarray, tau: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The posterior means μ_jh = (S_jh + τ_h m_h) / (N_j + τ_h) (module docstring); (k, d).

    >>> shrunk_rates(np.array([[1.0]]), np.array([2.0]), np.array([2.0]), np.array([0.25]))
    array([[0.375]])
    """
    return (S + tau[None, :] * m[None, :]) / (N[:, None] + tau[None, :])


def partition_evidence(S: np.ndarray, N: np.ndarray, concentration: float | None = None
                       ) -> float:
    """The evidence of a hard partition z of the rows into k components, from each
    component's code counts S (k, d) and (weighted) size N (k,):

        log p(X | z) + log p̂(z) = Σ_h max_τ log p(S_·h | τ) + Σ_j N_j log(N_j / Σ N),

    the first term every code's Beta–Bernoulli marginal likelihood (module docstring: the
    rates integrated out under the prior around the pooled rates, at the type-II τ_h of
    :func:`prior_strengths`), the second the labels' likelihood at their ML shares; with a
    ``concentration`` α, the labels' term is instead their marginal with the shares
    integrated out under a symmetric Dirichlet(α) (:func:`streammom.shares_prior.
    labels_log_prior`; the refinement fits α to its tree's leaves). It is the
    type-II marginal likelihood the shrunk EM's τ maximise, read as a score of the partition
    (*BDA* §5.3): higher when the components' rates differ where the data say they do and
    agree elsewhere. A partition is compared only with others of the same rows and weights
    (:func:`streammom.evidence.fit_evidence`).

    >>> S = np.array([[9.0, 1.0], [1.0, 9.0]]); N = np.array([10.0, 10.0])
    >>> split = partition_evidence(S, N)
    >>> mixed = partition_evidence(np.array([[5.0, 5.0], [5.0, 5.0]]), N)
    >>> bool(split > mixed + 5)  # two codes that tell the halves apart, or none
    True
    """
    codes = _type_two(S, N, pooled_rates(S, N))[1]
    if concentration is not None:
        return codes + labels_log_prior(N, concentration)
    full = N[N > 0]
    return codes + float((full * np.log(full / full.sum())).sum())
