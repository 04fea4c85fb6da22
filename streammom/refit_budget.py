"""The refit cost budget: refits take at most a share ``b`` of the engine's work, amortised over
the stream (``refit_every="auto"``; design §5 "refit policy").

A refit's cost is estimated in *event-equivalents* (the number of events the hot path ingests in
the same time) from the tree alone:

    cost(n_nodes, d) = n_nodes · (c₀ + c₂ · d²)

c₂ · d² per node covers the d × d work (assembling and unpacking C, the block-Krylov products of
the eigen-solve); c₀ the work independent of d (the split, the EM passes over the reservoirs,
bookkeeping). The constants were fitted on full refits (every internal node recomputed) of a
31-node tree at d = 500 … 4,000, events of ~10 codes, BLAS on one thread
(``bench/refit_cost.py``): 171k, 196k, 356k and 1.26M event-equivalents.

The budget is a token bucket. After N events the refits may have spent

    allowance(N) = b / (1 − b) · N + B · cost(2 · max_leaves − 1, d)

event-equivalents in all; a refit the growth schedule proposes runs only if the estimated
spend so far plus its own cost fits. The burst B (``GROWTH_REFITS`` full-tree refits) pays for
growing the tree on a young stream, where every refit matters for quality; after it, refits are
paced at (1 − b)/b · cost events apart, so throughput does not fall with d. The spend is
counted from the tree and d only — never a clock — so runs replay exactly. The estimate is
conservative: most refits recompute only the nodes that received enough new weight, and in
the daemon an event costs far more than in the bare engine.
"""

from __future__ import annotations

import math

__all__ = ["GROWTH_REFITS", "LIGHT_REFIT_NODE_EVENTS", "REFIT_NODE_EVENTS",
           "REFIT_NODE_EVENTS_PER_D2", "light_refit_cost_events", "refit_affordable_at",
           "refit_allowance", "refit_cost_events"]

#: B: full-tree refits' worth of cost a young stream may spend before the budget paces refits.
GROWTH_REFITS = 5

#: c₀: event-equivalents of a refit's per-node work independent of d.
REFIT_NODE_EVENTS = 3_900.0
#: c₂: event-equivalents per node per d² (the d × d work).
REFIT_NODE_EVENTS_PER_D2 = 0.00227
#: c_L: event-equivalents per node of a light refit (passes over the reservoirs only), the
#: top of what ``bench/refit_cost.py`` measured: 641–856 at d = 500 … 4,000, 31 nodes.
LIGHT_REFIT_NODE_EVENTS = 800.0


def refit_cost_events(n_nodes: int, d: int) -> float:
    """Estimated cost of one refit, in events of ingest: n_nodes · (c₀ + c₂ · d²).

    >>> round(refit_cost_events(31, 2_000))
    402380
    """
    return n_nodes * (REFIT_NODE_EVENTS + REFIT_NODE_EVENTS_PER_D2 * d * d)


def light_refit_cost_events(n_nodes: int) -> float:
    """Estimated cost of a light refit (the refinement alone: the sums' steps over the
    reservoirs from the tree's partition, no d × d work), in events of ingest: n_nodes · c_L.

    >>> light_refit_cost_events(31) < refit_cost_events(31, 500) / 5
    True
    """
    return n_nodes * LIGHT_REFIT_NODE_EVENTS


def refit_allowance(budget: float, n_events: int, max_leaves: int, d: int) -> float:
    """Event-equivalents the refits may have spent after ``n_events`` events: the budget's
    share of the ingest plus the growth burst (module docstring).

    >>> refit_allowance(0.2, 0, 1, 10) == GROWTH_REFITS * refit_cost_events(1, 10)
    True
    """
    return (budget / (1.0 - budget) * n_events
            + GROWTH_REFITS * refit_cost_events(2 * max_leaves - 1, d))


def refit_affordable_at(budget: float, spent: float, cost: float, max_leaves: int, d: int
                        ) -> int:
    """The fewest events seen N with ``spent + cost <= refit_allowance(budget, N, …)``: when a
    refit of estimated ``cost`` fits the budget, given the refit work ``spent`` so far.

    The allowance is linear in N, so N = ⌈(spent + cost − burst) · (1 − b) / b⌉ (0 while the
    burst lasts), corrected by a step where rounding puts the bound one event off — the
    result is exact for the predicate the refit policy tests.

    >>> c = refit_cost_events(31, 1_024)  # a full 16-leaf tree, after the burst's 5 refits
    >>> n = refit_affordable_at(0.2, 5 * c, c, 16, 1_024)
    >>> def fits(n): return 6 * c <= refit_allowance(0.2, n, 16, 1_024)
    >>> n, fits(n), fits(n - 1)
    (778754, True, False)
    """
    def fits(n: int) -> bool:
        return spent + cost <= refit_allowance(budget, n, max_leaves, d)

    burst = refit_allowance(budget, 0, max_leaves, d)
    n = max(0, math.ceil((spent + cost - burst) * (1.0 - budget) / budget))
    while not fits(n):
        n += 1
    while n > 0 and fits(n - 1):
        n -= 1
    return n
