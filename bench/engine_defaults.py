"""The streaming engine at its default settings: events/s with refits included, and held-out ARI.

    .venv/bin/python bench/engine_defaults.py [--events 2000000] [--d 2000] [--batch 32768]

Issue #14's acceptance stream: synthetic encounters from
:func:`streammom.datasets.make_hierarchical_bernoulli` (d = 2,000 codes, 16 latent leaves of a
depth-4 tree, ~10 codes an event), fed to ``StreamingHierarchy(d)`` — nothing else set — in
batches through ``partial_fit``; the refit policy runs inside the timed loop. ARI against the
true leaves on 50,000 held-out events. One core (thread pools pinned before numpy loads); the
compiled kernels are loaded before timing (start-up, as in the daemon).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from sklearn.metrics import adjusted_rand_score  # noqa: E402

from streammom import StreamingHierarchy  # noqa: E402
from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--d", type=int, default=2_000)
    ap.add_argument("--batch", type=int, default=32_768)
    args = ap.parse_args()
    X, y, _ = make_hierarchical_bernoulli(args.events + 50_000, args.d, 16,
                                          codes_per_event=10.0, random_state=0)
    X_held, y_held, X = X[args.events:], y[args.events:], X[:args.events]
    eng = StreamingHierarchy(args.d)
    eng.partial_fit(X[:10])  # loads the compiled kernels
    t0 = time.perf_counter()
    for start in range(10, X.shape[0], args.batch):
        eng.partial_fit(X[start:start + args.batch])
    seconds = time.perf_counter() - t0
    print(f"command: python {' '.join(sys.argv)}\n")
    print("| events | d | batch | seconds | events/s | refits | leaves | held-out ARI |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {X.shape[0] - 10:,} | {args.d:,} | {args.batch:,} | {seconds:.2f} | "
          f"{(X.shape[0] - 10) / seconds:,.0f} | {eng.n_refits_} | {eng.model_.n_leaves} | "
          f"{adjusted_rand_score(y_held, eng.predict(X_held)):.3f} |")


if __name__ == "__main__":
    main()
