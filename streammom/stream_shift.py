"""Whether the stream moved since the last refit: the leaves' shares of the events learned
since then against their shares of the stream sampled at it (design §5 "refit policy").

At every refit the root's reservoir — a uniform (under decay, recency-weighted) sample of the
stream so far — is routed by the routers the refit leaves, and each leaf keeps the rows it
received, r_l (n = Σ r_l). Until the next refit each leaf adds the weight the same routers send
it, a_l. With p_l = r_l / n and q_l = a_l / Σ a, the shift is their total variation

    shift = ½ Σ_l |q_l − p_l| ∈ [0, 1].

Under a stationary stream q and p are two samples of one distribution, and the shift is noise:
with m events since the refit and the pooled share p̄_l = (p_l + q_l) / 2, each |q_l − p_l|
is about half-normal with σ_l² = p̄_l (1 − p̄_l) (1/n + 1/m), so

    E[shift] ≈ ½ √(2/π) Σ_l σ_l.

The stream has *moved* when the shift is both large (≥ ``MOVED_SHIFT``) and well past that
noise (≥ ``MOVED_NOISE_Z`` times it). Clusters arriving in phases — the events sorted by
cluster, a new population appearing — move it to 0.6–0.9 at every refit, where the code streams
of the quality benches in random order stay at 0.02–0.10 (BENCHMARKS.md "Streams whose clusters
arrive in phases"). It is computed from counts the engine keeps anyway, never from a clock, so
runs replay exactly.

A new population. One cluster of k that appears in a stream that had settled moves the
shares by about its share of the new events, 0.16–0.17 on the 8-cluster streams of the phase
bench, under a floor of 0.25: every refit after it stayed light, and the cluster stayed in
another's leaf (0.87 × the oracle's ARI). A floor of 0.1 everywhere sees it (0.99) but also
counts the smaller shifts of a stream that is still moving (clusters emerging one after the
other: 0.22 at 27,000 events after 0.29–0.46 at every refit before), whose full refits then
spend the leaves on the clusters present so far (0.90 → 0.84). So the floor depends on the
last refit's own test: :data:`SETTLED_SHIFT` (0.1) after a refit that found the stream
settled, :data:`MOVED_SHIFT` (0.25) after one that found it moved. No stationary stream of
the acceptance benches reaches 0.1 at three times its noise (BENCHMARKS.md "A new population
after a settled stream").

>>> moved_shift(np.array([50, 50]), np.array([50.0, 50.0]), 100)
(0.0, 0.25)
>>> shift, threshold = moved_shift(np.array([500, 500]), np.array([0.0, 1000.0]), 1000)
>>> shift, shift >= threshold
(0.5, True)
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MOVED_NOISE_Z", "MOVED_SHIFT", "SETTLED_SHIFT", "moved_shift"]

#: The smallest shift of the leaves' shares that counts as a moved stream: a quarter of the
#: events going elsewhere than the sample at the last refit says.
MOVED_SHIFT = 0.25

#: The floor instead of :data:`MOVED_SHIFT` when the last refit found the stream settled
#: (module docstring, "a new population"): a tenth of the events going elsewhere.
SETTLED_SHIFT = 0.1

#: How far past its stationary noise a shift must be to count.
MOVED_NOISE_Z = 3.0


def moved_shift(refit_rows: np.ndarray, arrived: np.ndarray, n_events: float,
                floor: float = MOVED_SHIFT) -> tuple[float, float]:
    """The shift of the leaves' shares and the threshold it must reach (module docstring).

    ``refit_rows``: rows of the sample each leaf received at the last refit; ``arrived``: the
    weight each leaf received since (any positive scale); ``n_events``: the events learned
    since, m. Returns ``(shift, threshold)``; ``(0.0, inf)`` when either side is empty.
    """
    rows = np.asarray(refit_rows, dtype=np.float64)
    new = np.asarray(arrived, dtype=np.float64)
    n, total = float(rows.sum()), float(new.sum())
    if n <= 0 or total <= 0 or n_events <= 0:
        return 0.0, math.inf
    p, q = rows / n, new / total
    shift = 0.5 * float(np.abs(q - p).sum())
    pooled = 0.5 * (p + q)
    sigma = np.sqrt(pooled * (1.0 - pooled) * (1.0 / n + 1.0 / n_events))
    noise = 0.5 * math.sqrt(2.0 / math.pi) * float(sigma.sum())
    return shift, max(floor, MOVED_NOISE_Z * noise)
