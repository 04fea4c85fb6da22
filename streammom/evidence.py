"""The evidence of a code-set fit's partition, and fits compared by it.

A fit of a Bernoulli mixture labels each row with its MAP component; the *evidence* of that
partition is the rows' marginal likelihood with the components' rates integrated out under the
empirical-Bayes prior of :mod:`streammom.shrinkage`, plus the labels' own term
(:func:`streammom.shrinkage.partition_evidence`):

    log p(X | z) + log p̂(z) = Σ_h max_τ log p(S_·h | τ) + Σ_j N_j log(N_j / Σ N).

In a refinement the labels' term is the shares integrated out instead, under a symmetric
Dirichlet prior whose concentration is fitted to the events the tree's leaves hold
(:mod:`streammom.shares_prior`; :class:`EvidenceCache`'s ``concentration``): at the ML shares
the term pays a partition that merges two clusters the entropy it saves, which on a short
stream of comparable shares outweighs what the codes tell the merged clusters apart by.

The refinement (:mod:`streammom.refine`) compares fits of the same k components on the same
weighted rows — a restart against the fit it would replace, a re-split pair against the pair
it would replace (:mod:`streammom.pair_resplit`) — by it (:func:`better_fit`), not by their
likelihood. The likelihood net of its optimism (TIC, :func:`streammom.mixture.more_likely`)
charges every component the same p parameters whatever the events it holds, so between two
fits of k components it is the raw likelihood that decides; the evidence charges component j
about (p/2) log N_j (its rates' Occam factor: Schwarz 1978; *BDA* §5.3 for the exact
Beta–binomial marginal). A fit that cuts a heavy cluster in two and merges two light ones has
as many parameters as the truth's, fits half a nat of the heavy cluster's noise per rate, and
loses only what the light clusters' few events tell apart: the likelihood prefers it. The
evidence charges the cut (p/2) log(N/4) against the (p/2) log(n₁n₂/(n₁ + n₂)) the merge
saves, so it prefers the truth's. On code sets of eight leaves with Dirichlet(0.7) shares
(1,500–3,000 events, d = 300–500, 24 sets) EM from such a partition was more likely than EM
from the true labels net of TIC on 17 of 24, by up to 185 nats, and less evident on all 24,
by 87–635; in a 50,000-event stream of that kind, a spectral restart that replaced the tree's
fit at the refit of 3,000 events and the pair re-splits at 5,000 took it from 0.98 to 0.71 ×
the oracle's ARI (BENCHMARKS.md "Fits compared by the evidence of their partition").

Token counts (multinomial) have no such prior here; their fits are compared by the likelihood
(:func:`better_fit`).

One refit compares many fits on the same rows, and most of them share a partition (a move's
EM leaves most rows where they were): an :class:`EvidenceCache` computes each partition's
evidence once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from streammom.estimators import Family
from streammom.held_rates import on_few_held_columns
from streammom.mixture import MixtureEMResult, map_assign, more_likely, partition_sums
from streammom.shrinkage import partition_evidence

__all__ = ["EvidenceCache", "better_fit", "digest", "fit_evidence", "fit_labels",
           "labels_evidence"]


def digest(*arrays: np.ndarray) -> bytes:
    """A 128-bit digest of the arrays' bytes: a cache key for a set of rows (and their sides)."""
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    return h.digest()


def fit_labels(rows: sp.csr_array, fit: MixtureEMResult) -> np.ndarray:
    """Each row's MAP component under the Bernoulli ``fit``: the partition it is judged by."""
    return map_assign(rows, fit.means, fit.weights, "bernoulli")


def labels_evidence(rows: sp.csr_array, row_weight: np.ndarray, label: np.ndarray, k: int
                    ) -> float:
    """The evidence of the partition ``label`` of the weighted ``rows`` into ``k`` components:
    :func:`streammom.shrinkage.partition_evidence` of the components' weighted statistics.
    Rows that hold few of the columns (:func:`streammom.held_rates.few_held_columns`) are
    summed on those columns alone: a column no row holds has no statistics and no part in the
    evidence, so the value is the same, bit for bit, at O(k · held) instead of O(k · d)."""
    return _summed_evidence(on_few_held_columns(rows)[0], row_weight, label, k)


def _summed_evidence(rows: sp.csr_array, row_weight: np.ndarray, label: np.ndarray, k: int,
                     concentration: float | None = None) -> float:
    """:func:`labels_evidence` of rows already on the columns to sum (``concentration``: the
    shares' prior, :class:`EvidenceCache`)."""
    S, N = partition_sums(rows, row_weight, label, k)
    return partition_evidence(S, N, concentration)


def fit_evidence(rows: sp.csr_array, row_weight: np.ndarray, fit: MixtureEMResult) -> float:
    """The evidence of a Bernoulli fit's partition of the weighted ``rows`` (module
    docstring): each row at its MAP component, then :func:`labels_evidence`."""
    return labels_evidence(rows, row_weight, fit_labels(rows, fit), fit.means.shape[0])


@dataclass(eq=False)
class EvidenceCache:
    """The evidence of the partitions of one set of weighted ``rows``, each computed once
    (module docstring). Keys are digests of the partition's labels; the values are exactly
    what recomputing gives, so no comparison depends on the cache.

    >>> X = sp.csr_array(np.array([[1, 1, 0, 0]] * 6 + [[0, 0, 1, 1]] * 6, dtype=float))
    >>> truth = MixtureEMResult(means=np.array([[0.9, 0.9, 0.1, 0.1], [0.1, 0.1, 0.9, 0.9]]),
    ...     weights=np.array([0.5, 0.5]), log_likelihood=0.0, n_iter=0, converged=True)
    >>> mixed = MixtureEMResult(means=np.array([[0.5, 0.5, 0.5, 0.5], [0.4, 0.4, 0.4, 0.4]]),
    ...     weights=np.array([0.5, 0.5]), log_likelihood=0.0, n_iter=0, converged=True)
    >>> cache = EvidenceCache(X, np.ones(12))
    >>> cache.more_evident(truth, mixed), cache.more_evident(mixed, truth), len(cache.evidence)
    (True, False, 2)
    """

    rows: sp.csr_array
    row_weight: np.ndarray
    #: α of the symmetric Dirichlet prior the labels' term integrates the shares out under
    #: (:mod:`streammom.shares_prior`; the refinement fits it to its tree's leaves), for the
    #: partitions of the rows into as many components as the leaves; None: the ML shares
    concentration: float | None = None
    evidence: dict[bytes, float] = field(default_factory=dict)
    #: the rows on the columns they hold, when those are few (:func:`labels_evidence`): made
    #: once for every partition of the rows
    summed_rows: sp.csr_array = field(init=False)

    def __post_init__(self) -> None:
        self.summed_rows = on_few_held_columns(self.rows)[0]

    def fit_evidence(self, fit: MixtureEMResult) -> float:
        """:func:`fit_evidence` of a Bernoulli ``fit`` on the cache's rows."""
        return self.labels_evidence(fit_labels(self.rows, fit), fit.means.shape[0])

    def labels_evidence(self, label: np.ndarray, k: int) -> float:
        """:func:`labels_evidence` of the partition ``label`` of the cache's rows into ``k``
        components (a fit's MAP labels, when the caller has them already)."""
        key = digest(label, np.array([k]))
        if key not in self.evidence:
            self.evidence[key] = _summed_evidence(self.summed_rows, self.row_weight, label, k,
                                                  self.concentration)
        return self.evidence[key]

    def more_evident(self, new: MixtureEMResult, old: MixtureEMResult) -> bool:
        """Whether the Bernoulli fit ``new`` partitions the cache's rows with a higher
        evidence than ``old`` (module docstring)."""
        return self.fit_evidence(new) > self.fit_evidence(old)


def better_fit(new: MixtureEMResult, old: MixtureEMResult, family: Family,
               cache: EvidenceCache, *, net_of_optimism: bool) -> bool:
    """Whether ``new`` fits the weighted rows of ``cache`` better than ``old`` (the same k
    components): for code sets (Bernoulli) the partition of higher evidence (module
    docstring); for token counts the higher log-likelihood, net of each fit's optimism (TIC,
    :func:`streammom.mixture.more_likely`) when ``net_of_optimism``, else raw (both fits'
    ``log_likelihood`` must then be on these rows)."""
    if family == "bernoulli":
        return cache.more_evident(new, old)
    if net_of_optimism:
        return more_likely(new, old, cache.rows, family, sample_weight=cache.row_weight)
    return new.log_likelihood > old.log_likelihood
