"""Short streams at the defaults: the stream's ARI as a share of the oracle's, 300–1,000 events.

    .venv/bin/python bench/short_streams.py [--seeds 6] [--first-seed 0]

Issue #15's synthetic code streams (``quality_real._synthetic``: d = 500, 8 latent leaves,
~10 codes an event) of 300, 500, 800 and 1,000 events, seeds 0…5 (``--seeds``,
``--first-seed``), in the acceptance protocol's
order 0; ``StreamingHierarchy(500, max_leaves=8)`` at its defaults, batches of 1,000, then
``predict``. Each cell is the stream's ARI over the oracle's (MAP under the true parameters).
Rows per length, the shipped engine and five ablations (labelled: not settings): without the
moves by the evidence on a short stream's shrunk scores (``streammom.refine.EVIDENCE_MOVES``
off); without the
refinement's empirical-Bayes shrinkage (``streammom.refine.SHRINK`` off); without the moves
on a short stream's scores (``streammom.refine.is_short_stream`` answering no); without the
annealed restart (``streammom.refine.ANNEAL_BETAS`` emptied); and without the k-means start
either (``streammom.refine.kmeans_restart`` replaced by a function that returns None). One
core (thread pools pinned before numpy loads).
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from streammom import StreamingHierarchy, refine  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality_real import _shuffled, _synthetic  # noqa: E402

LENGTHS = (300, 500, 800, 1_000)


def share_of_oracle(n: int, seed: int) -> float:
    """The stream's ARI over the oracle's on the synthetic stream (n, seed), order 0."""
    s = _shuffled(_synthetic(n, seed))
    eng = StreamingHierarchy(s.X.shape[1], max_leaves=s.k)
    for start in range(0, n, 1_000):
        eng.partial_fit(s.X[start:start + 1_000])
    assert s.oracle is not None
    return adjusted_rand_score(s.y, eng.predict(s.X)) / adjusted_rand_score(s.y, s.oracle)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--first-seed", type=int, default=0)
    args = ap.parse_args()
    off: Any = lambda *a, **k: None  # noqa: E731
    never: Any = lambda *a, **k: False  # noqa: E731
    variants: tuple[tuple[str, dict[str, Any]], ...] = (
        ("shipped", {}),
        ("no moves by the evidence (ablation)", {"EVIDENCE_MOVES": False}),
        ("no shrinkage (ablation)", {"SHRINK": False}),
        ("no moves on the scores (ablation)", {"is_short_stream": never}),
        ("no annealed restart (ablation)", {"ANNEAL_BETAS": ()}),
        ("neither, nor the k-means start (ablation)",
         {"ANNEAL_BETAS": (), "kmeans_restart": off}))
    print(f"command: python {' '.join(sys.argv)}\n")
    last = args.first_seed + args.seeds - 1
    print(f"| events | engine | × oracle, seeds {args.first_seed}…{last} | ≥ 0.9 | mean |")
    print("|---:|---|---|---:|---:|")
    for n in LENGTHS:
        for name, changes in variants:
            saved = {attr: getattr(refine, attr) for attr in changes}
            for attr, value in changes.items():
                setattr(refine, attr, value)
            try:
                shares = [share_of_oracle(n, seed)
                          for seed in range(args.first_seed, args.first_seed + args.seeds)]
            finally:
                for attr, value in saved.items():
                    setattr(refine, attr, value)
            passed = sum(x >= 0.9 for x in shares)
            print(f"| {n:,} | {name} | {' '.join(f'{x:.2f}' for x in shares)} | "
                  f"{passed} of {len(shares)} | {np.mean(shares):.3f} |", flush=True)


if __name__ == "__main__":
    main()
