"""The refit cost budget: refits take at most a share ``b`` of the engine's work, amortised over
the stream (``refit_every="auto"``; design §5 "refit policy").

A refit's cost is estimated in *event-equivalents* (the number of events the hot path ingests in
the same time) from the tree alone:

    cost(n_nodes, d) = n_nodes · (c₀ + c₂ · d²)

c₂ · d² per node covers the d × d work (assembling and unpacking C, the block-Krylov products of
the eigen-solve); c₀ the work independent of d (the split, the EM passes over the reservoirs,
bookkeeping). The constants are the mean of three least-squares fits on full refits (every
internal node recomputed) of a 31-node tree at d = 500 … 4,000, events of ~10 codes, BLAS on
one thread (``bench/refit_cost.py``; 2026-11-26 and twice on 2026-11-27): c₀ 10,732–12,654,
c₂ 0.00101–0.00120; the last run measured 266k, 400k, 533k and 881k event-equivalents, which
the model puts at 368k, 394k, 498k and 915k. (The constants in use before, 3,900 and 0.00227,
from an older engine, put d = 1,000 at half its measured cost, so full refits after the burst
took about twice the budget's share there: BENCHMARKS.md "The refit cost model measured
again".)

The budget is a token bucket. After N events the refits may have spent

    allowance(N) = b / (1 − b) · N + B · cost(2 · max_leaves − 1, d)

event-equivalents in all; a refit the growth schedule proposes runs only if the estimated
spend so far plus its own cost fits. The burst B (``GROWTH_REFITS`` full-tree refits) pays for
growing the tree on a young stream, where every refit matters for quality; after it, refits are
paced at (1 − b)/b · cost events apart, so throughput does not fall with d. The spend is
counted from the tree and d only — never a clock — so runs replay exactly. The estimate is
conservative: most refits recompute only the nodes that received enough new weight, and in
the daemon an event costs far more than in the bare engine.

The burst belongs to a *young* stream: one that has learned at most
``YOUTH_EVENTS_PER_SLOT`` (16) events per slot of its leaves' reservoirs,

    N ≤ Y = 16 · max_leaves · reservoir_size        (262,144 events at the defaults),

so the refinement's rows are still a real share of what the tree learned. Past Y whatever the
young stream left of its allowance is forfeited — the spend counts as at least allowance(Y) —
and refits are paced by the share b of the events learned since Y alone. On a long stream
the burst's last full refits fall where the reservoirs hold a few per cent of the events;
there a full refit of a 16-leaf tree at d = 2,000 (0.6–0.9 s) labelled held-out events no
better than the light refit that replaces it (ARI 0.761 both at 360,458 events), and the
young stream's allowance paid for about half of the engine's time over its first 2M events
(BENCHMARKS.md "The growth burst belongs to a young stream"). Every stream of the quality
benches is young throughout (≤ 50,000 events), so their refits are unchanged.

Light refits (the refinement alone, c_L per node) have a burst of their own,
``GROWTH_LIGHT_REFITS`` light refits of the full tree: while it lasts, the light refits the
growth schedule proposes after the full burst run at once and are charged to it, not to the
spend the full refits are tested against, so they never delay a full refit. Without it a
stream that outlives the full burst by less than (1 − b)/b · c_L · nodes events (~99,000 at
16 leaves) would end on the model of its last growth refit: on 20,000-event code streams of 16
leaves that model was fitted at 8,000 events, and their labels reached 0.82–0.89 × the
oracle's ARI; with the light burst 0.89–0.94 (BENCHMARKS.md "A light burst after the growth
burst"). The light burst is a constant, so the amortised share stays b.

Moved streams. A stream whose events since the last refit fall on the leaves unlike the stream
before it (:mod:`streammom.stream_shift`: clusters arriving in phases, a new population) has
outgrown the tree its full refits built; light refits only re-weigh those leaves. The refit the
schedule proposes then runs in full if the spend stays within ``MOVED_REFITS`` full-tree refits
ahead of the allowance (:func:`moved_credit`, the ``credit`` of :func:`refit_affordable_at`).
The spend still counts every such refit, so the debt is repaid at the share b before a later
move borrows again: the amortised share stays b, and a stationary stream, which does not move,
is paced as before. Events sorted by cluster (20,000 × 500, 8 clusters) ended on a tree whose
last full refit came at 8,000 events, four of the clusters never seen by one, at 0.65–0.74 ×
the oracle's ARI (BENCHMARKS.md "Streams whose clusters arrive in phases").

A moved stream's full refit of code sets past the searches' bound also searches a sample of
its rows (:func:`streammom.searches.searched_on_sample`), work the refit's model does not
hold: it was calibrated on refits that run no search. That search is charged on its own, at
c_S event-equivalents per row × leaf of the sample (:func:`sample_search_cost_events`; the
sample holds at most ``refine.PAIR_WORK`` = 131,072 of them, ~1.2M event-equivalents, three
times a full refit of a 16-leaf tree at d = 1,000), and the moved credit counts each of its
``MOVED_REFITS`` refits with that search (:func:`moved_credit`'s ``search_work``). Uncharged,
a stream that keeps moving ran its refits at two to four times what the spend counted, so its
amortised share was well past b (BENCHMARKS.md "The moved refits' searches charged").
"""

from __future__ import annotations

import math

__all__ = [
    "GROWTH_LIGHT_REFITS",
    "GROWTH_REFITS",
    "LIGHT_REFIT_NODE_EVENTS",
    "MOVED_REFITS",
    "REFIT_NODE_EVENTS",
    "REFIT_NODE_EVENTS_PER_D2",
    "SAMPLE_SEARCH_WORK_EVENTS",
    "YOUTH_EVENTS_PER_SLOT",
    "light_refit_burst",
    "light_refit_cost_events",
    "moved_credit",
    "refit_affordable_at",
    "refit_allowance",
    "refit_cost_events",
    "sample_search_cost_events",
    "spent_past_youth",
    "youth_events",
]

#: B: full-tree refits' worth of cost a young stream may spend before the budget paces refits.
GROWTH_REFITS = 5

#: Light refits of the full tree a young stream may run on the growth schedule after the full
#: burst, outside the budget's pace (module docstring): at 1.5× growth, the light refits at
#: 12,000, 18,000 and 27,000 events of a stream whose full burst ended at 8,000. Ten (to
#: ~460,000) labelled 50,000-event streams worse (0.90–0.91 against 0.92 × the oracle): each
#: light refit moves the routers, so the leaves' sums mix more partitions.
GROWTH_LIGHT_REFITS = 3

#: Full-tree refits' worth of cost a stream that moved may spend ahead of its allowance
#: (module docstring, "moved streams").
MOVED_REFITS = GROWTH_REFITS

#: A stream is young (its growth burst open) while it has learned at most this many events per
#: slot of its leaves' reservoirs (module docstring).
YOUTH_EVENTS_PER_SLOT = 16

#: c₀: event-equivalents of a refit's per-node work independent of d.
REFIT_NODE_EVENTS = 11_600.0
#: c₂: event-equivalents per node per d² (the d × d work).
REFIT_NODE_EVENTS_PER_D2 = 0.00112
#: c_L: event-equivalents per node of a light refit (passes over the reservoirs only), the
#: top of what ``bench/refit_cost.py`` measured: 641–856 at d = 500 … 4,000, 31 nodes, on a
#: stream past its youth, where a light refit's EM passes are 0–3
#: (:func:`streammom.refine.light_em_passes`). A young stream's light refits run up to 50
#: passes over rows that hold most of it (~0.2 s at 12,000 rows of 16 leaves); they are the
#: light burst's, a constant, so the amortised share stays b.
LIGHT_REFIT_NODE_EVENTS = 800.0

#: c_S: event-equivalents per row × leaf of a search on a sample (module docstring). At the
#: searches' bound (``refine.PAIR_WORK`` rows × leaves) that is 1.18M, between the extra cost
#: of a moved refit over the settled one that ``bench/refit_cost.py`` times (0.84–1.36M at
#: d = 500 … 4,000, 16 leaves) and the searches alone timed on the phase streams (0.93–1.59M
#: at d = 1,000; BENCHMARKS.md "The moved refits' searches charged").
SAMPLE_SEARCH_WORK_EVENTS = 9.0


def refit_cost_events(n_nodes: int, d: int) -> float:
    """Estimated cost of one refit, in events of ingest: n_nodes · (c₀ + c₂ · d²).

    >>> round(refit_cost_events(31, 2_000))
    498480
    """
    return n_nodes * (REFIT_NODE_EVENTS + REFIT_NODE_EVENTS_PER_D2 * d * d)


def light_refit_cost_events(n_nodes: int) -> float:
    """Estimated cost of a light refit (the refinement alone: the sums' steps over the
    reservoirs from the tree's partition, no d × d work), in events of ingest: n_nodes · c_L.

    >>> light_refit_cost_events(31) < refit_cost_events(31, 500) / 5
    True
    """
    return n_nodes * LIGHT_REFIT_NODE_EVENTS


def sample_search_cost_events(work: int) -> float:
    """Estimated cost of a refit's searches on a sample of ``work`` rows × leaves, in events of
    ingest: c_S · work (module docstring).

    >>> round(sample_search_cost_events(131_072) / refit_cost_events(31, 1_000), 1)
    3.0
    """
    return SAMPLE_SEARCH_WORK_EVENTS * work


def light_refit_burst(max_leaves: int) -> float:
    """The light refits' own burst, in event-equivalents: ``GROWTH_LIGHT_REFITS`` light refits
    of a tree of ``max_leaves`` leaves (2 · max_leaves − 1 nodes).

    >>> light_refit_burst(16) == 3 * light_refit_cost_events(31)
    True
    """
    return GROWTH_LIGHT_REFITS * light_refit_cost_events(2 * max_leaves - 1)


def refit_allowance(budget: float, n_events: int, max_leaves: int, d: int) -> float:
    """Event-equivalents the refits may have spent after ``n_events`` events: the budget's
    share of the ingest plus the growth burst (module docstring).

    >>> refit_allowance(0.2, 0, 1, 10) == GROWTH_REFITS * refit_cost_events(1, 10)
    True
    """
    return (budget / (1.0 - budget) * n_events
            + GROWTH_REFITS * refit_cost_events(2 * max_leaves - 1, d))


def moved_credit(max_leaves: int, d: int, search_work: int = 0) -> float:
    """How far ahead of its allowance a stream that moved may spend on full refits:
    ``MOVED_REFITS`` full-tree refits (module docstring, "moved streams"), each with a search
    on a sample of ``search_work`` rows × leaves (0: the family runs none).

    >>> moved_credit(16, 1_024) == refit_allowance(0.2, 0, 16, 1_024)
    True
    >>> moved_credit(16, 1_024, 131_072) - moved_credit(16, 1_024) == (
    ...     MOVED_REFITS * sample_search_cost_events(131_072))
    True
    """
    return MOVED_REFITS * (refit_cost_events(2 * max_leaves - 1, d)
                           + sample_search_cost_events(search_work))


def youth_events(max_leaves: int, reservoir_size: int) -> int:
    """Y: the events a stream learns while young (module docstring),
    ``YOUTH_EVENTS_PER_SLOT · max_leaves · reservoir_size``.

    >>> youth_events(16, 1_024)
    262144
    """
    return YOUTH_EVENTS_PER_SLOT * max_leaves * reservoir_size


def spent_past_youth(spent: float, budget: float, youth: int, max_leaves: int, d: int
                     ) -> float:
    """The spend of a stream past its youth Y: at least the young stream's whole allowance,
    ``max(spent, refit_allowance(budget, Y, …))`` (module docstring). Idempotent.

    >>> a = refit_allowance(0.2, 262_144, 16, 1_024)
    >>> [spent_past_youth(x, 0.2, 262_144, 16, 1_024) / a for x in (0.0, 2 * a)]
    [1.0, 2.0]
    """
    return max(spent, refit_allowance(budget, youth, max_leaves, d))


def refit_affordable_at(budget: float, spent: float, cost: float, max_leaves: int, d: int,
                        *, youth: int | None = None, n_events: int = 0,
                        credit: float = 0.0) -> int:
    """The fewest events seen N with ``spent + cost <= refit_allowance(budget, N, …) + credit``:
    when a refit of estimated ``cost`` fits the budget, given the refit work ``spent`` so far
    (``credit``: how far ahead of the allowance it may run, :func:`moved_credit`).
    ``youth``: Y of :func:`youth_events` (None: always young); past it the spend is
    :func:`spent_past_youth` (module docstring), so the answer depends on the events seen so
    far, ``n_events``.

    The allowance is linear in N, so N = ⌈(spent + cost − burst) · (1 − b) / b⌉ (0 while the
    burst lasts), corrected by a step where rounding puts the bound one event off — the
    result is exact for the predicate the refit policy tests. With ``youth``: that N while
    the stream is young (``n_events`` ≤ Y) and N ≤ Y, else the fewest N > Y that affords the
    refit with the spend past youth.

    >>> c = refit_cost_events(31, 1_024)  # a full 16-leaf tree, after the burst's 5 refits
    >>> n = refit_affordable_at(0.2, 5 * c, c, 16, 1_024)
    >>> def fits(n): return 6 * c <= refit_allowance(0.2, n, 16, 1_024)
    >>> n, fits(n), fits(n - 1)
    (1584027, True, False)
    >>> refit_affordable_at(0.2, 2 * c, c, 16, 1_024, youth=262_144, n_events=100_000)
    0
    >>> refit_affordable_at(0.2, 2 * c, c, 16, 1_024, youth=262_144, n_events=300_000)
    1846171
    >>> refit_affordable_at(0.2, 6 * c, c, 16, 1_024, youth=262_144, n_events=300_000,
    ...                     credit=moved_credit(16, 1_024))
    262145
    """
    burst = refit_allowance(budget, 0, max_leaves, d)

    def first_fit(spent: float) -> int:
        def fits(n: int) -> bool:
            return spent + cost <= refit_allowance(budget, n, max_leaves, d)

        n = max(0, math.ceil((spent + cost - burst) * (1.0 - budget) / budget))
        while not fits(n):
            n += 1
        while n > 0 and fits(n - 1):
            n -= 1
        return n

    if youth is None:
        return first_fit(spent - credit)
    if n_events <= youth:
        n = first_fit(spent - credit)
        if n <= youth:
            return n
    return max(youth + 1,
               first_fit(spent_past_youth(spent, budget, youth, max_leaves, d) - credit))
