"""A stream that keeps moving: what its refits cost against the budget's share, at the defaults.

    .venv/bin/python bench/rotating_clusters.py [--windows 32] [--window 12500] [--seed 0]

The refit budget (:mod:`streammom.refit_budget`) lets a stream that moved run full refits
ahead of its allowance and repays the debt at the share b (0.2) of the engine's work. Here
the stream never settles: 16 clusters of hierarchical codes at d = 1,000
(:func:`streammom.datasets.make_hierarchical_bernoulli`), fed in windows of ``--window``
events, each window drawn from 4 active clusters, the set sliding by one cluster a window
(window w: clusters w … w + 3 mod 16), in batches of 1,000. Every full refit of such a stream
moves, and past the searches' bound searches a sample of its rows
(:func:`streammom.searches.searched_on_sample`).

Printed for the shipped engine and, labelled, for the engine whose spend leaves those searches
uncharged (the policy before the forty-second session): refits (full / light), searches on a
sample, the refits' seconds, the whole pass's seconds and their ratio, the refits' estimated
spend over the events seen, and the ARI over the oracle's on the last window's events (the
clusters active now). The refits' share of the pass over the stream's second half is what
the budget bounds: the growth burst and the moved credit are constants spent early, so the
share b holds only as the stream grows (``--windows`` 400: 5M events). One core (BLAS pinned
before numpy loads).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

import streammom.engine as engine_module  # noqa: E402
from streammom import StreamingHierarchy, refine  # noqa: E402
from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402
from streammom.mixture import map_assign  # noqa: E402

K, D, ACTIVE = 16, 1_000, 4


def rotating_order(y: np.ndarray, windows: int, window: int, seed: int) -> np.ndarray:
    """Row indices of the stream (module docstring): window w takes ``window`` / ACTIVE events
    from each of clusters w … w + ACTIVE − 1 (mod K), each cluster's events in their order
    (from its first again once all were taken), shuffled within the window by a generator
    seeded by ``seed``."""
    members = [np.flatnonzero(y == j) for j in range(K)]
    taken = np.zeros(K, dtype=np.int64)
    rng = np.random.default_rng(seed)
    per = window // ACTIVE
    order = []
    for w in range(windows):
        part = []
        for j in range(ACTIVE):
            c = (w + j) % K
            part.append(members[c][(taken[c] + np.arange(per)) % members[c].size])
            taken[c] += per
        order.append(rng.permutation(np.concatenate(part)))
    return np.concatenate(order)


@contextmanager
def searches_uncharged() -> Iterator[None]:
    """The spend without the searches on a sample (the policy before their charge)."""
    cost, credit = engine_module.sample_search_cost_events, engine_module.moved_credit
    engine_module.sample_search_cost_events = lambda work: 0.0  # type: ignore[assignment]
    engine_module.moved_credit = (  # type: ignore[assignment]
        lambda max_leaves, d, search_work=0: credit(max_leaves, d))
    try:
        yield
    finally:
        engine_module.sample_search_cost_events = cost  # type: ignore[assignment]
        engine_module.moved_credit = credit  # type: ignore[assignment]


def run(X: sp.csr_array, y: np.ndarray, oracle: np.ndarray, window: int) -> str:
    """One pass at the defaults; the table's cells."""
    searched: list[int] = []
    real = refine.searched_on_sample

    def counted(*a: object, **k: object) -> object:
        searched.append(1)
        return real(*a, **k)  # type: ignore[arg-type]

    refine.searched_on_sample = counted  # type: ignore[assignment]
    try:
        eng = StreamingHierarchy(D, max_leaves=K)
        half = X.shape[0] // 2
        refit_seconds, total = [0.0, 0.0], [0.0, 0.0]  # the stream's first and second half
        for start in range(0, X.shape[0], 1_000):
            before = eng.n_refits_
            t0 = time.perf_counter()
            eng.partial_fit(X[start:start + 1_000])
            total[start >= half] += time.perf_counter() - t0
            if eng.n_refits_ > before:
                refit_seconds[start >= half] += eng.last_refit_duration_
    finally:
        refine.searched_on_sample = real  # type: ignore[assignment]
    last = slice(X.shape[0] - window, X.shape[0])
    ratio = (adjusted_rand_score(y[last], eng.predict(X[last]))
             / adjusted_rand_score(y[last], oracle[last]))
    full = eng.n_refits_ - eng.n_light_refits_
    return (f"{full} / {eng.n_light_refits_} | {len(searched)} | "
            f"{sum(refit_seconds):.1f} / {sum(total):.1f} | "
            f"{refit_seconds[1]:.1f} / {total[1]:.1f} = {refit_seconds[1] / total[1]:.2f} | "
            f"{eng._refit_spent / eng.n_events_seen_:.2f} | {ratio:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--window", type=int, default=12_500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n = 400_000  # 25,000 events a cluster on average: a window takes 3,125 of four of them
    X, y, _, truth = make_hierarchical_bernoulli(n, D, K, codes_per_event=10.0,
                                                 random_state=args.seed, return_truth=True)
    X = sp.csr_array(X)
    order = rotating_order(y, args.windows, args.window, args.seed)
    X, y = X[order], y[order]
    oracle = map_assign(X, truth.prevalence, truth.leaf_weights, "bernoulli")
    print(f"{args.windows} windows × {args.window:,} events, {K} clusters ({ACTIVE} active), "
          f"d = {D:,}, seed {args.seed}\n")
    print("| engine | refits full / light | searches on a sample | refit s / pass s | "
          "second half: refit s / pass s | spend / events | last window × oracle |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| shipped | {run(X, y, oracle, args.window)} |", flush=True)
    with searches_uncharged():
        print(f"| searches uncharged (before) | {run(X, y, oracle, args.window)} |", flush=True)


if __name__ == "__main__":
    main()
