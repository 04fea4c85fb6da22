"""The labels' term of a partition's evidence: the shares integrated out under a Dirichlet prior
fitted to the tree's leaves.

The evidence of a hard partition of code sets (:func:`streammom.shrinkage.partition_evidence`)
is the codes' marginal likelihood plus the labels' own term. At the partition's ML shares that
term is Σ_j N_j log(N_j / N): the labels' entropy, which it pays a partition for every cluster
it merges (eight clusters of 37 events cost 300 log 8 = 624 nats, five of them about 480). On
the 300-event code streams that miss, the codes' term prefers EM from the true labels to the
stream's partition on all 14 seeds, and the ML labels' term reverses 11 of them
(BENCHMARKS.md "The labels' term of the evidence under a prior on the shares fitted to the
leaves").

Here the shares π are integrated out under a symmetric Dirichlet(α) prior, so the term is the
Dirichlet–multinomial (Pólya) marginal of the counts N (k,) (Minka 2000, "Estimating a
Dirichlet distribution", eq. 52; *BDA* §5.3 for the empirical-Bayes reading):

    log p(z | α) = log Γ(kα) − log Γ(Σ_j N_j + kα) + Σ_j [log Γ(N_j + α) − log Γ(α)].

α is the type-II ML estimate from the events the tree's k leaves hold, W (k,)
(:func:`shares_concentration`): α̂ = argmax_α log p(W | α) over :data:`CONCENTRATION_RANGE`, as
the codes' τ_h are estimated from their counts (:mod:`streammom.shrinkage`). A stream of
comparable shares gets a large α̂ (300 events in 8 leaves: 7–32), under which a merged
partition saves about a third less than at the ML shares; a stream of skewed shares a small one
(Dirichlet(0.7) shares, 3,000–10,000 events: 1.2–3.4), under which the term is the ML one's
within a few nats, so a cut across a heavy cluster is still charged its entropy. One α̂ judges
every partition of one refit: fitted per partition it cannot help, the Dirichlet–multinomial
marginal of a partition's own counts being at most their ML term.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import gammaln

__all__ = ["CONCENTRATION_RANGE", "labels_log_prior", "shares_concentration"]

#: The search's range of α (pseudo-events a component): 10⁻³, shares as skewed as any stream's,
#: to 10⁶, where the term is −N log k within 10⁻³ nat for any stream a refit holds.
CONCENTRATION_RANGE = (1e-3, 1e6)


def labels_log_prior(N: np.ndarray, alpha: float) -> float:
    """log p(z | α) of a partition whose k components hold (weighted) counts N (module
    docstring): the Dirichlet–multinomial marginal of the counts.

    >>> N = np.array([10.0, 10.0])
    >>> bool(abs(labels_log_prior(N, 1e6) + 20 * np.log(2)) < 1e-3)  # shares fixed at 1/k
    True
    >>> bool(labels_log_prior(np.array([20.0, 0.0]), 1.0) > labels_log_prior(N, 1.0))
    True
    """
    N = np.asarray(N, dtype=float)
    k = N.size
    return float(gammaln(k * alpha) - gammaln(N.sum() + k * alpha)
                 + (gammaln(N + alpha) - gammaln(alpha)).sum())


def shares_concentration(weights: np.ndarray) -> float:
    """α̂, the type-II ML concentration of a symmetric Dirichlet prior on the shares, from the
    events ``weights`` (k,) the tree's leaves hold (module docstring): the maximiser of
    :func:`labels_log_prior` over :data:`CONCENTRATION_RANGE`, searched on log α (bounded
    Brent, deterministic).

    >>> shares_concentration(np.array([50.0, 50.0, 50.0, 50.0])) > 1e5  # as even as can be
    True
    >>> bool(shares_concentration(np.array([700.0, 200.0, 60.0, 40.0])) < 5)
    True
    """
    W = np.asarray(weights, dtype=float)
    lo, hi = np.log(CONCENTRATION_RANGE)
    found = minimize_scalar(lambda t: -labels_log_prior(W, float(np.exp(t))), bounds=(lo, hi),
                            method="bounded", options={"xatol": 1e-6})
    return float(np.exp(found.x))
