"""Code sets over a wide vocabulary: the stream at its defaults against KMeans and
MiniBatchKMeans, each in its own process (seconds, peak RSS, ARI).

    .venv/bin/python bench/wide_codes.py [--events 3000] [--d 50000] [--k 8]

A vocabulary of all ICD-10-CM codes is ~74,000 columns, of which a few thousand events use a
few thousand. The stream: ``StreamingHierarchy(d, max_leaves=k)`` at its defaults, one pass
in batches of 1,000, then ``predict`` (issue #15's protocol); the rows from
``make_hierarchical_bernoulli`` (8 codes an event). The peers fit the same CSR rows with
scikit-learn's defaults (``n_init=3``, seeded). One core (thread pools pinned before numpy
loads); each method runs in a child process, so its peak RSS is its own.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

METHODS = ("stream, defaults", "KMeans", "MiniBatchKMeans")


def child(method: str, n: int, d: int, k: int) -> dict[str, float]:
    """Fit ``method`` on the stream's rows in this process: seconds, peak RSS (MB), ARI."""
    import numpy as np
    import scipy.sparse as sp
    from sklearn.cluster import KMeans, MiniBatchKMeans
    from sklearn.metrics import adjusted_rand_score

    from streammom import StreamingHierarchy
    from streammom.datasets import make_hierarchical_bernoulli

    X, y = make_hierarchical_bernoulli(n, d, k, codes_per_event=8.0, random_state=0)[:2]
    X = sp.csr_array(X)
    t0 = time.perf_counter()
    if method == "KMeans":
        labels = KMeans(k, n_init=3, random_state=0).fit_predict(X)
    elif method == "MiniBatchKMeans":
        labels = MiniBatchKMeans(k, batch_size=1_000, n_init=3, random_state=0).fit_predict(X)
    else:
        eng = StreamingHierarchy(d, max_leaves=k)
        for start in range(0, n, 1_000):
            eng.partial_fit(X[start:start + 1_000])
        labels = eng.predict(X)
    seconds = time.perf_counter() - t0
    return {"seconds": round(seconds, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "ari": round(float(adjusted_rand_score(y, np.asarray(labels))), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=3_000)
    ap.add_argument("--d", type=int, default=50_000)
    ap.add_argument("--k", type=int, default=8, help="leaves of the generator (a power of 2)")
    ap.add_argument("--child", choices=METHODS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.events, args.d, args.k)))
        return
    print(f"command: python {' '.join(sys.argv)}\n")
    print("| method | seconds | peak RSS (MB) | ARI |\n|---|---:|---:|---:|")
    for method in METHODS:
        run = subprocess.run([sys.executable, __file__, "--child", method, "--events",
                              str(args.events), "--d", str(args.d), "--k", str(args.k)],
                             check=True, capture_output=True, text=True)
        r = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"| {method} | {r['seconds']} | {r['peak_rss_mb']} | {r['ari']} |", flush=True)


if __name__ == "__main__":
    main()
