"""The streaming engine's hyper-parameters: one table, read by the engine and the daemon.

:class:`~streammom.engine.StreamingHierarchy` validates its arguments against
:data:`ENGINE_PARAMETERS`, stores them in snapshots through it, and ``service.config`` builds
the daemon's ``[model]`` settings from it (same names, defaults, bounds and descriptions), so a
parameter is declared exactly once. The descriptions are the short form of the engine's
docstring (design §3–§5).
"""

from __future__ import annotations

from streammom.estimators import FAMILY_OPTIONS
from streammom.params import FLAG, Interval, Options, Param

__all__ = ["ENGINE_PARAMETERS"]

_FRACTION = Interval(float, 0.0, 1.0)
_HALF_OPEN_HALF = Interval(float, 0.0, 0.5, closed="left")
_NON_NEGATIVE = Interval(float, 0.0, None)
_POSITIVE = Interval(float, 0.0, None, closed="neither")

ENGINE_PARAMETERS: tuple[Param, ...] = (
    Param("max_depth", 8, (Interval(int, 0, 32),),
          "split levels below the root (a leaf at depth max_depth never splits)"),
    Param("max_leaves", 16, (Interval(int, 1, 1 << 20),), "leaf budget of the tree"),
    Param("min_split_weight", 50.0, (_NON_NEGATIVE,),
          "decayed weight a leaf needs before it may split (on a stream too short for "
          "max_leaves such leaves: its weight / max_leaves, at least min_reservoir_split)"),
    Param("half_life", None, (_POSITIVE, None),
          "exponential forgetting: weights halve every half_life events or seconds; None: "
          "no forgetting"),
    Param("half_life_unit", "events", (Options(("events", "seconds")),),
          "unit of half_life (seconds need event timestamps)"),
    Param("refit_every", "auto", (Interval(int, 1, None), Options(("auto",)), None),
          "auto: the growth schedule paced by refit_budget (at most half_life/4 apart under "
          "forgetting in events); an int: refit at least this often; None: no event trigger"),
    Param("first_refit", 50, (Interval(int, 1, None), None),
          "growth schedule: the first refit after this many events, then one each time the "
          "stream has grown by half (a tree on short streams); None: no growth schedule"),
    Param("refit_budget", 0.2, (Interval(float, 0.0, 1.0, closed="neither"),),
          "with refit_every=auto, the share of the work refits may take, amortised after a "
          "growth burst on the young stream (its first 16 x max_leaves x reservoir_size "
          "events; a refit's cost estimated from the tree size and d; deterministic); "
          "a scheduled refit it cannot afford in full yet is light (the refinement alone)"),
    Param("refit_every_seconds", None, (_POSITIVE, None),
          "refit after this many seconds of event time; None: no time trigger"),
    Param("reservoir_size", 1024, (Interval(int, 2, 1 << 24),),
          "events kept per node (children, repairs and the refinement's EM start from them)"),
    Param("basis_dim", 8, (Interval(int, 2, 512),),
          "dimension m of the tracked third-order basis (m(m+1)(m+2)/6 sums a node)"),
    Param("method", "sidiwo", (Options(("dsidiwo", "sidiwo")),),
          "split rule: D-SIDIWO discriminators or SIDIWO pseudo-centres"),
    Param("family", "auto", (Options(FAMILY_OPTIONS),),
          "bernoulli: code sets (raw moments); multinomial: token counts (single-topic "
          "estimators); auto: from the first batch learned (binary: bernoulli, else "
          "multinomial)"),
    Param("em", True, (FLAG,),
          "refine the routers at every refit by EM over the leaves (their reservoirs), "
          "started from the leaves' sums"),
    Param("em_max_iter", 100, (Interval(int, 1, None),),
          "EM iterations per refit (stops earlier when the centres move < 1e-4)"),
    Param("random_state", 0, (Interval(int, 0, None),),
          "seed of every random choice (reservoirs, eigensolver starts)"),
    Param("refit_min_new_fraction", 0.1, (_NON_NEGATIVE,),
          "a node is refit after new weight >= f x its weight; f starts here"),
    Param("refit_max_new_fraction", 0.25, (_NON_NEGATIVE,),
          "cap of f (doubles after every refit that barely moved the router)"),
    Param("stable_share", 0.02, (_FRACTION,),
          "a refit re-routing at most this share of the reservoir counts as stable"),
    Param("resplit_threshold", 0.25, (_FRACTION,),
          "share of a node's reservoir changing child that rebuilds its subtree"),
    Param("prune_fraction", 0.02, (_HALF_OPEN_HALF,),
          "children merge back when one holds less than this share of the node's weight"),
    Param("min_child_fraction", 0.05, (_HALF_OPEN_HALF,),
          "a split giving a child less than this share of the reservoir is refused"),
    Param("min_rotation_gap", 0.0, (_FRACTION,),
          "floor on the relative eigen-gap of G for a split"),
    Param("min_spectral_gap", 0.0, (_FRACTION,),
          "floor on (lambda2 - lambda3) / lambda1 of M2 for a split"),
    Param("basis_tol", 0.05, (_NON_NEGATIVE,),
          "rebase the tracked basis when the top-2 eigenvectors leave it by more than this"),
    Param("min_reservoir_split", 32, (Interval(int, 1, None),),
          "reservoir rows a node needs before it may split"),
    Param("max_lineage", 10_000, (Interval(int, 0, None),),
          "lineage records kept (oldest dropped)"),
    Param("chunk_size", 32_768, (Interval(int, 1, None),),
          "rows per hot-path chunk (bounds temporary memory)"),
)
