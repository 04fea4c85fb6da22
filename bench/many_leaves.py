"""Code streams of 32 and 64 clusters at the defaults: the stream's ARI as a share of the oracle's.

    .venv/bin/python bench/many_leaves.py [--seeds 0 1]

Issue #15's acceptance asks ≥ 0.9 × the oracle's ARI on synthetic hierarchical code streams;
the other benches stop at 16 latent leaves (32 in ``uncovered_shapes.py``, 10,000–20,000
events). These are trees of 32 and 64 leaves over d = 2,000–4,000 codes, 30,000–200,000
events of 10 codes (:func:`streammom.datasets.make_hierarchical_bernoulli`): past the young
stream's full refits the light refits carry the model (a full refit of a 127-node tree at
d = 4,000 costs more than the budget affords for a long while). Each stream:
``StreamingHierarchy(d, max_leaves=k)`` at its defaults, one pass in batches of 1,000, then
``predict`` (``long_streams.stream_ari``). Beside it, what maximum likelihood reaches on the
same events: EM (Bernoulli, to convergence) started from the true labels, its MAP labels'
ARI over the oracle's. One core (thread pools pinned before numpy loads).
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402
from streammom.mixture import fit_from_partition, map_assign  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from long_streams import stream_ari  # noqa: E402  (the acceptance protocol, timed)

#: (events, d, latent leaves)
STREAMS = [
    (30_000, 2_000, 32), (100_000, 2_000, 32), (30_000, 2_000, 64), (50_000, 2_000, 64),
    (100_000, 4_000, 64), (200_000, 4_000, 64),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = ap.parse_args()
    print("| events | d | k | seed | oracle ARI | EM from the truth × oracle "
          "| stream × oracle (clusters, s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for n, d, k in STREAMS:
        for seed in args.seeds:
            X, y, _, truth = make_hierarchical_bernoulli(
                n, d, k, codes_per_event=10.0, random_state=seed, return_truth=True)
            X = sp.csr_array(X)
            oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence,
                                                       truth.leaf_weights, "bernoulli"))
            ml = fit_from_partition(X, np.ones(n), np.asarray(y), k, family="bernoulli",
                                    max_iter=200, tol=1e-5)
            ml_ari = adjusted_rand_score(y, map_assign(X, ml.means, ml.weights, "bernoulli"))
            stream, clusters, seconds = stream_ari(X, y, d, k)
            ratios.append(stream / oracle)
            print(f"| {n:,} | {d:,} | {k} | {seed} | {oracle:.3f} | {ml_ari / oracle:.2f} | "
                  f"{stream / oracle:.3f} ({clusters}, {seconds:.0f}) |", flush=True)
    r = np.array(ratios)
    print(f"\n≥ 0.9 × the oracle: {(r >= 0.9).sum()} of {r.size} (mean {r.mean():.3f})")


if __name__ == "__main__":
    main()
