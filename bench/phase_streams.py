"""Streams whose clusters arrive in phases, at the defaults (issue #15's protocol otherwise).

    .venv/bin/python bench/phase_streams.py [--quick]

Issue #15's protocol feeds the events in a random order. A production stream often does not:
patients of a new phenotype appear, a topic starts trending, a file is sorted by its label.
Each stream here is fed in five orders, in batches of 1,000, then ``predict`` on all events:

* ``random`` — the protocol's own (control: the moved-stream test must leave it alone);
* ``sorted`` — every event of cluster 0, then of cluster 1, …;
* ``half sorted`` — the first half of the events sorted by cluster, the rest in random order;
* ``emerging`` — cluster j starts arriving after j / (2k) of the stream and keeps arriving
  (arrival time start_j + (1 − start_j) · u, u uniform);
* ``late`` — the last cluster (1/k of the events) arrives only in the second half of the
  stream, every other event in random order: a new population whose shift of the leaves'
  shares stays under the moved test's floor (:mod:`streammom.stream_shift`).

Cells: the stream's ARI over the oracle's (MAP under the true parameters) at the defaults,
the same with the moved streams' credit switched off (``refit_budget.moved_credit`` = 0: the
policy before it, where a stream past its growth burst refits light whatever it brings), and
MiniBatchKMeans fed the same batches with ``partial_fit`` (the online peer; k-means++ on the
first batch, seeded). Real sets of more than 5,000 events (when installed; the reservoirs
hold a smaller one whole, whatever its order) are fed sorted by their label; their cells are
raw ARIs. One core (BLAS pinned by the engine).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.cluster import MiniBatchKMeans
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import offline_sets
import quality_real as qr

import streammom.engine as engine_module
from streammom import StreamingHierarchy
from streammom.datasets import make_hierarchical_bernoulli
from streammom.mixture import map_assign

#: (events, d, clusters) of the synthetic streams, seeds 0 and 1 each.
SHAPES = [(20_000, 500, 8), (50_000, 1_000, 16)]
ORDERS = ("random", "sorted", "half sorted", "emerging", "late")


def arrival(y: np.ndarray, order: str, seed: int) -> np.ndarray:
    """The permutation of the events that ``order`` feeds (module docstring)."""
    n = y.size
    if order == "random":
        return np.arange(n)  # the generator's rows are already in random order
    if order == "sorted":
        return np.argsort(y, kind="stable")
    if order == "half sorted":
        half = n // 2
        return np.concatenate([np.argsort(y[:half], kind="stable"), np.arange(half, n)])
    k = int(y.max()) + 1
    if order == "late":
        half = n // 2
        early = np.flatnonzero((np.arange(n) < half) & (y != k - 1))
        rest = np.setdiff1d(np.arange(n), early)
        return np.concatenate([early, rest[np.random.default_rng(seed).permutation(rest.size)]])
    start = np.arange(k) / (2.0 * k)
    u = np.random.default_rng(seed).random(n)
    return np.argsort(start[y] + (1.0 - start[y]) * u, kind="stable")


def stream_labels(X: sp.csr_array, k: int, *, credit: bool) -> tuple[np.ndarray, int]:
    """The protocol: defaults, batches of 1,000, then ``predict``; the labels and the number
    of light refits. ``credit=False`` switches the moved streams' credit off."""
    real = engine_module.moved_credit
    if not credit:
        engine_module.moved_credit = lambda *_: 0.0  # type: ignore[assignment]
    try:
        eng = StreamingHierarchy(X.shape[1], max_leaves=k)
        for start in range(0, X.shape[0], 1_000):
            eng.partial_fit(X[start:start + 1_000])
        return eng.predict(X), eng.n_light_refits_
    finally:
        engine_module.moved_credit = real


def minibatch_labels(X: sp.csr_array, k: int) -> np.ndarray:
    km = MiniBatchKMeans(n_clusters=k, random_state=0, n_init=1)
    for start in range(0, X.shape[0], 1_000):
        km.partial_fit(X[start:start + 1_000])
    return km.predict(X)


def row(name: str, X: sp.csr_array, y: np.ndarray, k: int, scale: float) -> str:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shipped, light = stream_labels(X, k, credit=True)
        before, light_before = stream_labels(X, k, credit=False)
        peer = minibatch_labels(X, k)
    cells = [adjusted_rand_score(y, lab) / scale for lab in (shipped, before, peer)]
    return (f"| {name} | {cells[0]:.3f} ({light}) | {cells[1]:.3f} ({light_before}) | "
            f"{cells[2]:.3f} | {time.perf_counter() - t0:.0f} |")


def synthetic(shapes: list[tuple[int, int, int]], seeds: range
              ) -> list[Callable[[], list[str]]]:
    jobs = []
    for n, d, k in shapes:
        for seed in seeds:
            def job(n: int = n, d: int = d, k: int = k, seed: int = seed) -> list[str]:
                X, y, _, truth = make_hierarchical_bernoulli(n, d, k, random_state=seed,
                                                             return_truth=True)
                X = sp.csr_array(X)
                oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence,
                                                           truth.leaf_weights, "bernoulli"))
                out = []
                for order in ORDERS:
                    p = arrival(y, order, seed)
                    out.append(row(f"{n:,} × {d:,} × {k}, seed {seed}, {order}", X[p], y[p], k,
                                   oracle))
                return out
            jobs.append(job)
    return jobs


def header(first: str) -> str:
    return (f"| {first} | defaults (light refits) | moved credit off (light refits) "
            "| MiniBatchKMeans | s |\n|---|---:|---:|---:|---:|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first shape, seed 0 only")
    args = parser.parse_args()
    print(f"command: python {' '.join(sys.argv)}\n")
    print(header("stream, order"))
    shapes, seeds = (SHAPES[:1], range(1)) if args.quick else (SHAPES, range(2))
    for job in synthetic(shapes, seeds):
        for line in job():
            print(line, flush=True)
    if args.quick:
        return
    print("\nReal sets sorted by their label (raw ARI):\n")
    print(header("set, sorted"))
    sets = [qr._orange_text("reuters-r8", 8), qr._orange_text("20newsgroups", 20),
            *(qr._offline(loader) for loader in offline_sets.LOADERS)]
    for s in sets:  # a set the reservoirs hold whole (≤ 5,000 events) is order-free
        if s is None or s.X.shape[0] <= 5_000:
            continue
        p = np.argsort(s.y, kind="stable")
        print(row(f"{s.name}", s.X[p], s.y[p], s.k, 1.0), flush=True)


if __name__ == "__main__":
    main()
