"""The refinement's searches for code sets, on a refit's rows or on a sample of them.

A searched refit (:mod:`streammom.refine`) takes the routers' fit through three local search
steps: pair re-splits (:mod:`streammom.pair_resplit`), split-and-merge moves kept when more
likely net of their optimism, and a second round of moves tried by the full EM and kept by the
evidence of their partitions (:mod:`streammom.split_merge`). They cost O(nnz · k) an EM pass
for every candidate, so they run while the refit's rows × leaves (leaves counted up to
:data:`~streammom.refine.WORK_LEAVES`) is at most :data:`~streammom.refine.PAIR_WORK`
(:func:`search`).

**Past that bound, on a sample.** A full refit past it — a tree of 16 leaves whose reservoirs
hold more than 8,192 rows, or of 32–64 leaves — gets no search: the tree's partition, fitted
to whatever clusters the stream held when it grew, is only polished by EM. Where the stream
*moved* since the last refit (:mod:`streammom.stream_shift`: clusters arriving in phases, a
new population) that partition is the one that most needs a merge of two leaves that share a
cluster and a split of one that holds two. There (the refinement is given the stream's
sample) :func:`searched_on_sample` runs the same three steps on a sample of the rows within
the bound — each leaf's reservoir thinned to at most ⌊rows bound / k⌋ rows chosen by a
seeded generator (:func:`search_sample`), every kept row weighted up so that each leaf's
weight is unchanged — then one shrunk EM on all the rows from the searched fit (the refit's
own EM there is shrunk too, :mod:`streammom.shrinkage`), kept when its partition of all the
rows is the more evident (:func:`streammom.evidence.better_fit`). A stationary stream's full
refits past the bound (a long stream's, paced by the cost budget) stay unsearched: the search
on a sample takes 1.8–3.1 s at d = 1,000 on one core, two to four times the refit it runs in,
while a moved stream's refits are few and bought by its own credit. The budget charges it
(:func:`streammom.refit_budget.sample_search_cost_events`, c_S per row × leaf of the sample)
and counts it in the moved credit, so a stream that keeps moving still refits within its
share of the engine's time.

On the phase streams' 50,000 × 1,000 × 16 shape (``bench/acceptance_suite.py --families
phase``; BENCHMARKS.md "Searches on a sample of a long stream's rows") half-sorted arrival
went 0.870 / 0.914 → 0.959 / 0.959 × the oracle's ARI and emerging clusters 0.896 / 0.922 →
0.898 / 0.965; no stream of the default acceptance families reaches a full refit past the
bound, so all 273 are unchanged.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streammom.estimators import Family
from streammom.evidence import EvidenceCache, better_fit
from streammom.mixture import MixtureEMResult, fit_mixture_em
from streammom.pair_resplit import pair_resplit
from streammom.split_merge import MOVE_TRIALS, MoveCache, split_merge

__all__ = ["search", "search_sample", "searched_on_sample"]


def search(rows: sp.csr_array, row_weight: np.ndarray, fit: MixtureEMResult, family: Family,
           *, tol: float, max_iter: int, random_state: int, anneal: tuple[float, ...],
           cache: MoveCache) -> MixtureEMResult:
    """Pair re-splits, then split-and-merge moves by the likelihood net of its optimism, then
    the second round of moves tried by the full EM (``anneal``'s tempered passes first) and kept
    by the evidence (module docstring): the searched fit, ``fit`` itself when no step gains.
    ``max_iter``: each step's EM passes. ``cache``: made for these ``rows`` and ``row_weight``."""
    found = pair_resplit(rows, row_weight, fit, family, tol=tol, max_iter=max_iter,
                         random_state=random_state, cache=cache)
    found = split_merge(rows, row_weight, found, family, tol=tol, max_iter=max_iter,
                        random_state=random_state, cache=cache)
    return split_merge(rows, row_weight, found, family, tol=tol, max_iter=max_iter,
                       random_state=random_state, trials=MOVE_TRIALS, anneal=anneal,
                       evidence_check=True, cache=cache)


def search_sample(sizes: list[int], max_rows: int, random_state: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a sample of stacked reservoirs (``sizes``: each reservoir's rows, stacked in
    that order) of at most ``max_rows`` rows in all: each reservoir keeps
    m = min(size, ⌊max_rows / len(sizes)⌋) rows (at least one) drawn without replacement by a
    generator seeded by ``random_state``, the reservoir's index and size. Returns the kept rows'
    indices into the stack (increasing) and each one's weight factor size / m, so that a
    reservoir's rows keep its weight.

    >>> index, factor = search_sample([4, 2], max_rows=4, random_state=0)
    >>> index.size, factor.tolist()
    (4, [2.0, 2.0, 1.0, 1.0])
    >>> bool((index[:2] < 4).all()), index[2:].tolist()
    (True, [4, 5])
    """
    quota = max(1, max_rows // max(len(sizes), 1))
    index, factor = [], []
    start = 0
    for b, n in enumerate(sizes):
        m = min(n, quota)
        rng = np.random.default_rng([random_state, b, n])
        picked = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
        index.append(start + picked)
        factor.append(np.full(m, n / m if m else 0.0))
        start += n
    return np.concatenate(index), np.concatenate(factor)


def searched_on_sample(rows: sp.csr_array, row_weight: np.ndarray, sizes: list[int],
                       fit: MixtureEMResult, family: Family, cache: EvidenceCache, *,
                       max_rows: int, tol: float, max_iter: int, passes: int,
                       random_state: int, anneal: tuple[float, ...]) -> MixtureEMResult | None:
    """The searches of a refit past their bound, on a sample (module docstring): :func:`search`
    on :func:`search_sample`'s rows from ``fit``, then ``passes`` passes of shrunk EM on all the
    ``rows`` from the searched fit. That fit when its partition of all the rows is more evident
    than ``fit``'s (``cache``: made for ``rows`` and ``row_weight``); None when the search
    found nothing or its fit is not the more evident. Code sets (Bernoulli) only."""
    index, factor = search_sample(sizes, max_rows, random_state)
    sample, sample_weight = rows[index], row_weight[index] * factor
    found = search(sample, sample_weight, fit, family, tol=tol, max_iter=max_iter,
                   random_state=random_state, anneal=anneal,
                   cache=MoveCache(sample, sample_weight, cache.concentration))
    if found is fit:
        return None
    full = fit_mixture_em(rows, found.means, found.weights, family=family, tol=tol,
                          max_iter=passes, sample_weight=row_weight, shrink=True)
    return full if better_fit(full, fit, family, cache, net_of_optimism=False) else None
