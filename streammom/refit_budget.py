"""The refit cost budget: how many events must pass between refits so that refits take at most
a share ``b`` of the engine's work (design §5 "refit policy").

A refit's cost is estimated in *event-equivalents* (the number of events the hot path ingests in
the same time) from the tree alone:

    cost(n_nodes, d) = n_nodes · (c₀ + c₂ · d²)

c₂ · d² per node covers the d × d work (assembling and unpacking C, the block-Krylov products of
the eigen-solve); c₀ the work independent of d (the split, the EM passes over the reservoirs,
bookkeeping). The constants were fitted on full refits (every internal node recomputed) of a
31-node tree at d = 500 … 4,000, events of ~10 codes, BLAS on one thread
(``bench/refit_cost.py``): 171k, 196k, 356k and 1.26M event-equivalents. A refit is due
after at least

    (1 − b) / b · cost(n_nodes, d)

events (``refit_every="auto"``), so refits take ≤ b of the time whatever d is once the growth
schedule (first_refit · 2^refits, which keeps a tree growing on short streams) has reached that
interval; the growth schedule's refits, a geometric series, are outside the budget. The
estimate depends only on the tree and the state width — never on a clock — so runs replay
exactly and forks of one engine keep refitting together. It is conservative: most refits
recompute only the nodes that received enough new weight, and in the daemon an event costs
far more than in the bare engine.
"""

from __future__ import annotations

import math

__all__ = ["AUTO_MIN_INTERVAL", "REFIT_NODE_EVENTS", "REFIT_NODE_EVENTS_PER_D2",
           "budget_interval", "refit_cost_events"]

#: ``refit_every="auto"`` never refits more often than this once the growth schedule is done.
AUTO_MIN_INTERVAL = 10_000

#: c₀: event-equivalents of a refit's per-node work independent of d.
REFIT_NODE_EVENTS = 3_900.0
#: c₂: event-equivalents per node per d² (the d × d work).
REFIT_NODE_EVENTS_PER_D2 = 0.00227


def refit_cost_events(n_nodes: int, d: int) -> float:
    """Estimated cost of one refit, in events of ingest: n_nodes · (c₀ + c₂ · d²).

    >>> round(refit_cost_events(31, 2_000))
    402380
    """
    return n_nodes * (REFIT_NODE_EVENTS + REFIT_NODE_EVENTS_PER_D2 * d * d)


def budget_interval(budget: float, n_nodes: int, d: int) -> int:
    """Fewest events between refits for refits to take at most ``budget`` of the work.

    >>> budget_interval(0.2, 1, 100)
    15691
    >>> budget_interval(0.5, 31, 2_000) == round(refit_cost_events(31, 2_000))
    True
    """
    if not 0.0 < budget < 1.0:
        raise ValueError("budget must be in (0, 1)")
    return math.ceil((1.0 - budget) / budget * refit_cost_events(n_nodes, d))
