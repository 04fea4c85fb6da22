"""Long and wide code streams at the defaults: the stream's ARI as a share of the oracle's.

    .venv/bin/python bench/long_streams.py [--seeds 11 12]

Issue #15's acceptance asks ≥ 0.9 × the oracle's ARI "on synthetic hierarchical code streams"
of any length. ``bench/quality_real.py`` and ``bench/short_streams.py`` draw them at d = 500,
8 leaves, 500–100,000 events; these are wider and longer: d = 500–3,000 codes, 4–16 latent
leaves, 1,000–50,000 events, 6–20 codes an event, signal 0.6–0.8
(:func:`streammom.datasets.make_hierarchical_bernoulli`). Each stream:
``StreamingHierarchy(d, max_leaves=k)`` at its defaults, one pass in batches of 1,000, then
``predict``; the oracle is MAP under the true parameters. Two rows a stream: the shipped
engine, and an ablation without the four parts added for these streams (pair re-splits,
split-and-merge moves, the leaves' sums in the M-step, light refits:
:mod:`streammom.pair_resplit`, :mod:`streammom.split_merge`, :mod:`streammom.stream_sums`,
``StreamingHierarchy.refit``) — the engine as it was before them. One core (thread pools
pinned before numpy loads).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from streammom import StreamingHierarchy, refine, searches  # noqa: E402
from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402
from streammom.mixture import map_assign  # noqa: E402

#: (events, d, latent leaves, codes an event, signal)
STREAMS = [
    (1_000, 500, 8, 10.0, 0.8), (2_000, 1_000, 8, 10.0, 0.8), (1_500, 400, 4, 6.0, 0.8),
    (3_000, 500, 8, 20.0, 0.6), (5_000, 500, 4, 10.0, 0.8), (5_000, 2_000, 16, 12.0, 0.8),
    (8_000, 800, 16, 10.0, 0.8), (10_000, 3_000, 8, 8.0, 0.7), (20_000, 1_000, 16, 10.0, 0.8),
    (50_000, 2_000, 8, 10.0, 0.7),
]


@contextlib.contextmanager
def before_long_stream_parts() -> Iterator[None]:
    """The engine without pair re-splits, split-and-merge moves, the leaves' sums and light
    refits (the ablation)."""
    saved = (searches.pair_resplit, searches.split_merge, refine.split_merge,
             refine.with_stream_sums)
    afford = StreamingHierarchy._affordable_at

    def full_only(self: StreamingHierarchy, *, light: bool) -> int:
        return 1 << 62 if light else afford(self, light=False)

    searches.pair_resplit = lambda rows, w, fit, *a, **k: fit  # type: ignore[assignment]
    refine.with_stream_sums = lambda rows, w, fit, *a, **k: fit  # type: ignore[assignment]
    refine.split_merge = lambda rows, w, fit, *a, **k: fit  # type: ignore[assignment]
    searches.split_merge = refine.split_merge  # type: ignore[assignment]
    StreamingHierarchy._affordable_at = full_only  # type: ignore[method-assign]
    try:
        yield
    finally:
        (searches.pair_resplit, searches.split_merge, refine.split_merge,
         refine.with_stream_sums) = saved
        StreamingHierarchy._affordable_at = afford  # type: ignore[method-assign]


def stream_labels(X: sp.csr_array, d: int, k: int) -> np.ndarray:
    """The acceptance protocol on ``X``: ``StreamingHierarchy(d, max_leaves=k)`` at its
    defaults, one pass in batches of 1,000, then ``predict``."""
    eng = StreamingHierarchy(d, max_leaves=k)
    for start in range(0, X.shape[0], 1_000):
        eng.partial_fit(X[start:start + 1_000])
    return eng.predict(X)


def stream_ari(X: sp.csr_array, y: np.ndarray, d: int, k: int) -> tuple[float, int, float]:
    """(ARI, clusters, seconds) of the acceptance protocol on ``X``."""
    t0 = time.perf_counter()
    labels = stream_labels(X, d, k)
    return (adjusted_rand_score(y, labels), len(np.unique(labels)),
            time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[11, 12])
    args = ap.parse_args()
    print("| events | d | k | codes | signal | seed | oracle | shipped × oracle (clusters, s) "
          "| before × oracle |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    shipped_all, before_all = [], []
    for n, d, k, codes, signal in STREAMS:
        for seed in args.seeds:
            X, y, _, truth = make_hierarchical_bernoulli(
                n, d, k, codes_per_event=codes, signal=signal, random_state=seed,
                return_truth=True)
            X = sp.csr_array(X)
            oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence,
                                                       truth.leaf_weights, "bernoulli"))
            shipped, clusters, seconds = stream_ari(X, y, d, k)
            with before_long_stream_parts():
                before, _, _ = stream_ari(X, y, d, k)
            shipped_all.append(shipped / oracle)
            before_all.append(before / oracle)
            print(f"| {n:,} | {d:,} | {k} | {codes:g} | {signal:g} | {seed} | {oracle:.3f} | "
                  f"{shipped / oracle:.2f} ({clusters}, {seconds:.1f}) | "
                  f"{before / oracle:.2f} |", flush=True)
    ok = sum(r >= 0.9 for r in shipped_all)
    print(f"\n≥ 0.9 × the oracle: shipped {ok} of {len(shipped_all)} (mean "
          f"{np.mean(shipped_all):.3f}), before {sum(r >= 0.9 for r in before_all)} of "
          f"{len(before_all)} (mean {np.mean(before_all):.3f})")


if __name__ == "__main__":
    main()
