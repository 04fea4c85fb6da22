"""The stream at its defaults over several arrival orders of the same labelled rows.

    .venv/bin/python bench/stream_orders.py [--orders 5]

``bench/quality_real.py`` runs the acceptance protocol of issue #15 on one seeded order. The
stream's tree depends on the order the events arrive in (which clusters the first refits
split off), so one order can flatter or wrong it; this runs the same protocol (defaults,
``max_leaves=k``, batches of 1,000, then ``predict``) on orders 0 … N−1 of every real set and
prints the mean, minimum and maximum ARI. One core (BLAS pinned by the engine).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
import offline_sets
import quality_real as qr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=5)
    args = parser.parse_args()
    print(f"command: python {' '.join(sys.argv)}\n")
    print("| set | k | orders | mean ARI | min | max | ARI per order |")
    print("|---|---:|---:|---:|---:|---:|---|")
    sets = [qr._digits(), qr._orange_text("reuters-r8", 8), qr._orange_text("20newsgroups", 20),
            *(qr._offline(loader) for loader in offline_sets.LOADERS)]
    for s in sets:
        if s is None:
            continue
        scores = []
        for seed in range(args.orders):
            shuffled = qr._shuffled(s, seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                scores.append(adjusted_rand_score(shuffled.y, qr._stream(shuffled)))
        a = np.array(scores)
        print(f"| {s.name} | {s.k} | {a.size} | {a.mean():.3f} | {a.min():.3f} | {a.max():.3f} "
              f"| {' '.join(f'{x:.3f}' for x in a)} |", flush=True)


if __name__ == "__main__":
    main()
