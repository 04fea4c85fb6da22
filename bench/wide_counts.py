"""Short, wide, dense-ish counts: ``StreamingHierarchy`` against ``HierarchicalMoM`` (issue #14).

    .venv/bin/python bench/wide_counts.py [--rows 1350] [--d 8170] [--nnz 1100]

Issue #14's genotype case: 1,350 individuals × 8,170 variants, ~1,100 non-zero minor-allele
counts (1 or 2) a row, from 4 populations whose allele frequencies differ (so there is structure
to find). Each estimator runs in its own child process, default settings with the multinomial
family (counts): ``HierarchicalMoM().fit`` and ``StreamingHierarchy(d).partial_fit`` in batches
of 1,000 rows then ``predict``. Prints seconds, the child's peak RSS and ARI against the
populations, and the ratios (targets: stream ≤ 10× the batch fit's time, ≤ 1 GB).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp


def wide_counts(rows: int, d: int, nnz: int, seed: int = 0) -> tuple[sp.csr_array, np.ndarray]:
    """Counts in {0, 1, 2}: per population, variant frequencies p (Beta around a shared base);
    each row draws ~``nnz`` non-zero variants weighted by its population's p, counts 1 or 2."""
    rng = np.random.default_rng(seed)
    base = rng.beta(0.5, 4.0, d)
    pops = np.clip(base[None, :] * rng.lognormal(0.0, 0.6, (4, d)), 1e-6, 0.95)
    y = rng.integers(0, 4, rows)
    keys = np.log(pops[y]) + rng.gumbel(size=(rows, d))
    cols = np.sort(np.argpartition(-keys, nnz, axis=1)[:, :nnz], axis=1)
    second = rng.random((rows, nnz)) < np.take_along_axis(pops[y], cols, axis=1)
    data = 1.0 + second.astype(np.float64)
    indptr = np.arange(0, rows * nnz + 1, nnz)
    return sp.csr_array((data.ravel(), cols.ravel().astype(np.int32), indptr), shape=(rows, d)), y


def child(method: str, rows: int, d: int, nnz: int) -> None:
    from sklearn.metrics import adjusted_rand_score

    from streammom import HierarchicalMoM, StreamingHierarchy

    X, y = wide_counts(rows, d, nnz)
    t0 = time.perf_counter()
    if method == "batch":
        labels = HierarchicalMoM(family="multinomial").fit(X).predict(X)
    else:
        eng = StreamingHierarchy(d, family="multinomial")
        for start in range(0, rows, 1_000):
            eng.partial_fit(X[start:start + 1_000])
        labels = eng.predict(X)
    seconds = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"method": method, "seconds": round(seconds, 2), "peak_rss_mb": round(rss),
                      "ari": round(float(adjusted_rand_score(y, labels)), 3)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_350)
    ap.add_argument("--d", type=int, default=8_170)
    ap.add_argument("--nnz", type=int, default=1_100)
    ap.add_argument("--child", choices=("batch", "stream"))
    args = ap.parse_args()
    if args.child:
        child(args.child, args.rows, args.d, args.nnz)
        return
    out = {}
    for method in ("batch", "stream"):
        run = subprocess.run([sys.executable, __file__, "--child", method, "--rows",
                              str(args.rows), "--d", str(args.d), "--nnz", str(args.nnz)],
                             check=True, capture_output=True, text=True)
        out[method] = json.loads(run.stdout.strip().splitlines()[-1])
    print(json.dumps({**out, "time_ratio": round(out["stream"]["seconds"]
                                                 / out["batch"]["seconds"], 1)}))


if __name__ == "__main__":
    main()
