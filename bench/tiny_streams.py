"""Streams too short for their leaf budget, and the growth floor: ARI as a share of the oracle's.

    .venv/bin/python bench/tiny_streams.py [--seeds 0 1 2]
    .venv/bin/python bench/tiny_streams.py --long --batch-size 100 [--seeds 2 3 4 5]

Issue #15's acceptance asks for never fewer than k/2 clusters. A stream of fewer than about
twenty events a cluster grows at most about n / 16 leaves at the defaults (a leaf needs
``min_reservoir_split`` = 32 rows to split), so the refit's growth floor
(``streammom.refit.RefitPass._grow_to_floor``) lets leaves of 8 rows split while the tree is
below half its budget. Each stream: :func:`streammom.datasets.make_hierarchical_bernoulli`
(10 codes an event unless given), ``StreamingHierarchy(d, max_leaves=k)`` at its defaults, one
pass in batches of ``--batch-size`` (1,000: the acceptance protocol), then ``predict``; each
cell the stream's ARI over the oracle's (MAP under the true parameters) and the labels used,
shipped and without the floor (ablation: ``_grow_to_floor`` replaced by a no-op; not a
setting). ``--long``: streams of 3,000–10,000 events instead, to show that the floor, which
acts on the young tree of every stream fed in small batches, leaves what such a stream learns
as it was. One core (thread pools pinned before numpy loads).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from streammom import StreamingHierarchy  # noqa: E402
from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402
from streammom.mixture import map_assign  # noqa: E402
from streammom.refit import RefitPass  # noqa: E402

#: (events, d, leaves, codes an event): 4–40 events a cluster.
TINY = ((60, 500, 8, 10.0), (100, 500, 8, 10.0), (150, 500, 8, 10.0), (100, 500, 16, 10.0),
        (160, 500, 16, 10.0), (300, 1_000, 32, 10.0), (250, 500, 8, 10.0),
        (400, 1_000, 16, 10.0))
#: Streams long enough for their budget, fed in small batches (``--long``).
LONG = ((4_000, 500, 16, 8.0), (10_000, 1_000, 16, 10.0), (3_000, 1_000, 8, 8.0))


@contextmanager
def without_floor() -> Iterator[None]:
    """The ablation: no growth floor."""
    saved = RefitPass._grow_to_floor
    RefitPass._grow_to_floor = lambda self, n_leaves: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        RefitPass._grow_to_floor = saved  # type: ignore[method-assign]


def stream(X: sp.csr_array, d: int, k: int, batch: int) -> tuple[np.ndarray, int]:
    """The labels of one pass at the defaults, and the growth floor's splits made."""
    eng = StreamingHierarchy(d, max_leaves=k)
    for start in range(0, X.shape[0], batch):
        eng.partial_fit(X[start:start + batch])
    floor = sum(1 for r in eng.lineage_ if r["event"] == "split" and r.get("growth_floor"))
    return eng.predict(X), floor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batch-size", type=int, default=1_000)
    ap.add_argument("--long", action="store_true", help="the long streams instead")
    args = ap.parse_args()
    print(f"command: python {' '.join(sys.argv)}\n")
    print("| events × d × k | codes | seed | oracle ARI | shipped × oracle (labels; floor "
          "splits) | no floor (ablation) |")
    print("|---|---:|---:|---:|---|---|")
    shipped, ablated, few = [], [], [0, 0]
    for n, d, k, codes in LONG if args.long else TINY:
        for seed in args.seeds:
            X, y, _, truth = make_hierarchical_bernoulli(
                n, d, k, codes_per_event=codes, random_state=seed, return_truth=True)
            X = sp.csr_array(X)
            oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence,
                                                       truth.leaf_weights, "bernoulli"))
            labels, floor = stream(X, d, k, args.batch_size)
            with without_floor():
                bare, _ = stream(X, d, k, args.batch_size)
            cells = []
            for i, (lab, out) in enumerate(((labels, shipped), (bare, ablated))):
                out.append(adjusted_rand_score(y, lab) / oracle)
                used = np.unique(lab).size
                few[i] += used < k / 2
                cells.append(f"{out[-1]:.3f} ({used}")
            print(f"| {n:,} × {d:,} × {k} | {codes:g} | {seed} | {oracle:.3f} | "
                  f"{cells[0]}; {floor}) | {cells[1]}) |", flush=True)
    print(f"\nshipped: mean {np.mean(shipped):.3f} × the oracle, fewer than k/2 labels on "
          f"{few[0]} of {len(shipped)}; no floor: mean {np.mean(ablated):.3f}, fewer than k/2 "
          f"on {few[1]}")


if __name__ == "__main__":
    main()
