"""The issue's code-stream generator at shapes drawn at random: the stream's ARI as a share
of the oracle's.

    .venv/bin/python bench/random_shapes.py [--draws 3 4] [--streams 14]

Issue #15's acceptance asks ≥ 0.9 × the oracle's ARI on synthetic hierarchical code streams,
checked on streams we do not see. ``bench/long_streams.py`` runs
:func:`streammom.datasets.make_hierarchical_bernoulli` at twenty hand-picked shapes; this bench
draws the shapes instead, so that no shape is chosen because the engine does well on it: per
stream, events from {1,500, 2,000, 4,000, 8,000, 15,000}, d from {300, 500, 1,000, 2,000},
leaves from {4, 8, 16} (the generator's trees are balanced), codes an event from
{6, 8, 10, 15} and the generator's seed from [100, 10,000), all uniform, from a
``numpy.random.default_rng(1000 + draw)`` for each ``--draws`` value. Each stream:
``StreamingHierarchy(d, max_leaves=k)`` at its defaults, one pass in batches of 1,000, then
``predict``; the oracle is MAP under the true parameters. One core (thread pools pinned
before numpy loads).
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402
from streammom.mixture import map_assign  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from long_streams import stream_ari  # noqa: E402  (the acceptance protocol, timed)

EVENTS = (1_500, 2_000, 4_000, 8_000, 15_000)
FEATURES = (300, 500, 1_000, 2_000)
LEAVES = (4, 8, 16)
CODES = (6.0, 8.0, 10.0, 15.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, nargs="+", default=[3, 4])
    ap.add_argument("--streams", type=int, default=14, help="streams a draw")
    args = ap.parse_args()
    print(f"command: python {' '.join(sys.argv)}\n")
    print("| draw | events | d | k | codes | seed | oracle | stream × oracle (clusters, s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    shares, few = [], 0
    for draw in args.draws:
        rng = np.random.default_rng(1000 + draw)
        for _ in range(args.streams):
            n, d = int(rng.choice(EVENTS)), int(rng.choice(FEATURES))
            k, codes = int(rng.choice(LEAVES)), float(rng.choice(CODES))
            seed = int(rng.integers(100, 10_000))
            X, y, _, truth = make_hierarchical_bernoulli(
                n, d, k, codes_per_event=codes, random_state=seed, return_truth=True)
            oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence, truth.leaf_weights,
                                                       "bernoulli"))
            ari, clusters, seconds = stream_ari(X, y, d, k)
            shares.append(ari / oracle)
            few += clusters < k / 2
            print(f"| {draw} | {n:,} | {d:,} | {k} | {codes:g} | {seed} | {oracle:.3f} | "
                  f"{ari / oracle:.3f} ({clusters}, {seconds:.1f}) |", flush=True)
    print(f"\n≥ 0.9 × the oracle: {sum(s >= 0.9 for s in shares)} of {len(shares)} (mean "
          f"{np.mean(shares):.3f}); fewer than k/2 clusters: {few}")


if __name__ == "__main__":
    main()
