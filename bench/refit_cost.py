"""Calibration of the refit cost budget (:mod:`streammom.refit_budget`).

    .venv/bin/python bench/refit_cost.py

For d in 500 … 4,000: grow the default engine's tree (16 latent leaves, ~10 codes an event) on
50,000 events, time the ingest of 300,000 more (refits off), then one refit in which every
internal node has enough new weight to be recomputed. Prints the refit's cost in
event-equivalents (refit seconds / seconds per ingested event) and the least-squares fit
cost = n_nodes · (c₀ + c₂ · d²) whose constants ``streammom.refit_budget`` uses; then, after
10,000 more events, one light refit (``refit(light=True)``: the refinement alone), its cost
per node against c_L. Last, the same full refit from the same state (a snapshot restored) with
the stream taken as moved (``stream_moved`` answering yes): the refinement then restarts from
the stream's sample and searches a sample of the rows
(:func:`streammom.searches.searched_on_sample`), work the refit's model does not hold; the
table gives its extra cost over the settled refit against what the budget charges for it,
c_S · ``refine.PAIR_WORK``
(:func:`streammom.refit_budget.sample_search_cost_events`). One core (thread pools pinned
before numpy loads).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import time  # noqa: E402

import numpy as np  # noqa: E402

from streammom import StreamingHierarchy, refine  # noqa: E402
from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402
from streammom.refit_budget import (  # noqa: E402
    LIGHT_REFIT_NODE_EVENTS,
    REFIT_NODE_EVENTS,
    REFIT_NODE_EVENTS_PER_D2,
    sample_search_cost_events,
)


def main() -> None:
    print("| d | nodes | µs per event | refit ms | refit in events | light refit ms | "
          "light in events per node |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    lights: list[float] = []
    moved: list[tuple[int, float, float]] = []
    for d in (500, 1_000, 2_000, 4_000):
        X, *_ = make_hierarchical_bernoulli(360_000, d, 16, codes_per_event=10.0,
                                            random_state=0)
        eng = StreamingHierarchy(d, refit_every=None)
        eng.partial_fit(X[:50_000])
        for _ in range(5):
            eng.refit()
        t0 = time.perf_counter()
        eng.partial_fit(X[50_000:350_000])
        per_event = (time.perf_counter() - t0) / 300_000
        state = eng.snapshot()
        t0 = time.perf_counter()
        eng.refit()
        refit = time.perf_counter() - t0
        n = len(eng.nodes_)
        rows.append((d, n, refit / per_event))
        moved.append((d, refit / per_event, moved_refit(state) / per_event))
        eng.partial_fit(X[350_000:])
        t0 = time.perf_counter()
        eng.refit(light=True)
        light = time.perf_counter() - t0
        lights.append(light / per_event / n)
        print(f"| {d:,} | {n} | {per_event * 1e6:.2f} | {refit * 1e3:.0f} | "
              f"{refit / per_event:,.0f} | {light * 1e3:.0f} | {lights[-1]:,.0f} |",
              flush=True)
    d = np.array([r[0] for r in rows], dtype=float)
    y = np.array([r[2] / r[1] for r in rows])
    c0, c2 = np.linalg.lstsq(np.vstack([np.ones_like(d), d * d]).T, y, rcond=None)[0]
    print(f"\nfit per node: c0 = {c0:,.0f} events, c2 = {c2:.3g} events/d² "
          f"(in use: {REFIT_NODE_EVENTS:,.0f}, {REFIT_NODE_EVENTS_PER_D2:.3g}); light refits "
          f"{min(lights):,.0f}–{max(lights):,.0f} events a node (in use: c_L = "
          f"{LIGHT_REFIT_NODE_EVENTS:,.0f})")
    charged = sample_search_cost_events(refine.PAIR_WORK)
    print("\n| d | settled refit in events | moved refit in events | extra | charged for it |")
    print("|---:|---:|---:|---:|---:|")
    for d, settled, moving in moved:
        print(f"| {d:,} | {settled:,.0f} | {moving:,.0f} | {moving - settled:,.0f} | "
              f"{charged:,.0f} |")


def moved_refit(state: bytes) -> float:
    """Seconds of the full refit of the engine ``state`` with the stream taken as moved."""
    eng = StreamingHierarchy.restore(state)
    real = StreamingHierarchy.stream_moved
    StreamingHierarchy.stream_moved = lambda self: True  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        eng.refit()
        return time.perf_counter() - t0
    finally:
        StreamingHierarchy.stream_moved = real  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
